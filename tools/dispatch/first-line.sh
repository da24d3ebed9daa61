#!/bin/bash
# Median time from a `carma submit` process's exec to its job's first
# command's exec, for 24 jobs submitted one at a time to a fresh daemon
# on 4 simulated GPUs (the first two are left out), traced with perf's
# scheduler tracepoints, which hardly slow what they watch. Runs as root
# (perf -a). Compare two builds by alternating them:
#
#   tools/dispatch/first-line.sh OLD/carma /tmp; tools/dispatch/first-line.sh target/release/carma /tmp
#
# Usage: first-line.sh [CARMA_BINARY] [PARENT_DIR]   (defaults:
# target/release/carma, /tmp; /dev/shm puts the spool on tmpfs)
set -euo pipefail
BIN=$(realpath "${1:-target/release/carma}")
WORK=$(mktemp -d "${2:-/tmp}/carma-first-line.XXXXXX")
trap 'pkill -f -- "--spool $WORK/spool" || true; rm -rf "$WORK"' EXIT
mkdir -p "$WORK/jobs" "$WORK/marks"
printf '[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n' > "$WORK/carma.toml"
(cd "$WORK" && CARMA_CONFIG="$WORK/carma.toml" setsid "$BIN" daemon --simulate-gpus 4x40GiB \
    --spool "$WORK/spool" 2>"$WORK/daemon.log" >/dev/null &)
sleep 1
cat > "$WORK/jobs.sh" <<EOS
#!/bin/bash
for i in \$(seq 24); do
  printf "memory: 1G\ndate +%%s.%%N > $WORK/marks/\$i\n" > $WORK/jobs/j\$i.rad
  CARMA_CONFIG=$WORK/carma.toml '$BIN' submit --spool $WORK/spool $WORK/jobs/j\$i.rad >/dev/null
  while [ ! -s $WORK/marks/\$i ]; do sleep 0.002; done
  sleep 0.3
done
EOS
chmod +x "$WORK/jobs.sh"
perf record -q -a -e sched:sched_process_exec,syscalls:sys_enter_exit_group \
    -o "$WORK/perf.data" "$WORK/jobs.sh" >/dev/null 2>&1
perf script -i "$WORK/perf.data" -F comm,pid,time,event,trace 2>/dev/null | python3 -c '
import re, statistics, sys
events = []
for line in sys.stdin:
    m = re.match(r"\s*(\S+)\s+(\d+)\s+([\d.]+):\s+(\S+)\s*(.*)", line)
    if m:
        events.append((int(m.group(2)), float(m.group(3)), m.group(4), m.group(5)))
execs = [e for e in events if "process_exec" in e[2] and sys.argv[1] in e[3]]
exits = {}
for pid, t, what, _ in events:
    if "exit_group" in what and pid not in exits:
        exits[pid] = t
rows = []
for pid, t, what, args in events:
    if "process_exec" not in what or "/date" not in args:
        continue
    # The submit: the latest carma started before this job and ended
    # before it (a supervisor ends after its job).
    submits = [e for e in execs if e[1] < t and exits.get(e[0], 1e18) < t]
    if submits:
        s = submits[-1]
        rows.append(((exits[s[0]] - s[1]) * 1e3, (t - s[1]) * 1e3))
rows = rows[2:]
print("%d jobs: submit process median %.2f ms; submit exec -> first command median %.2f ms (min %.2f)" % (
    len(rows), statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows),
    min(r[1] for r in rows)))
' "$BIN"

#!/bin/bash
# 200 trivial jobs in one `carma submit` to a fresh daemon on 4 simulated
# GPUs: wall time from the submit's start until the last is in done/, and
# the whole machine's busy CPU (/proc/stat) per job. Compare two builds by
# alternating them, on a machine otherwise idle:
#
#   tools/dispatch/burst-cpu.sh OLD/carma; tools/dispatch/burst-cpu.sh target/release/carma
#
# Usage: burst-cpu.sh [CARMA_BINARY] [PARENT_DIR]   (defaults:
# target/release/carma, /dev/shm; /tmp puts the spool on disk). Runs as
# root (the jobs run as the daemon's user).
set -euo pipefail
BIN=$(realpath "${1:-target/release/carma}")
W=$(mktemp -d "${2:-/dev/shm}/carma-burst.XXXXXX")
trap 'pkill -f -- "--spool $W/spool" || true; sleep 0.3; rm -rf "$W"' EXIT
mkdir -p "$W/jobs"
printf '[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n' > "$W/carma.toml"
for i in $(seq 200); do printf 'memory: 1G\ntrue\n' > "$W/jobs/b$i.rad"; done
(cd "$W" && CARMA_CONFIG="$W/carma.toml" setsid "$BIN" daemon --simulate-gpus 4x40GiB \
    --spool "$W/spool" 2>"$W/daemon.log" >/dev/null &)
sleep 1.5
D=$(pgrep -f -- "daemon --simulate-gpus 4x40GiB --spool $W/spool" | head -1)
N=$(pgrep -f -P "$D" -- "supervise --nursery" | head -1)
# Measured in this one process: a poll that started `ls` and `wc` took a
# tenth of the CPU it measured.
CARMA_CONFIG="$W/carma.toml" python3 - "$BIN" "$W" "$D" "$N" <<'PY'
import glob, json, os, subprocess, sys, time
binary, w, daemon, nursery = sys.argv[1:]
hz, n = os.sysconf("SC_CLK_TCK"), 200
def busy():
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return sum(cpu[i] for i in (0, 1, 2, 5, 6, 7)) / hz
def own(pid, reaped):
    # User and system time of a process (14, 15), and of the children it
    # reaped (16, 17): the nursery reaps the supervisors, which reap their
    # jobs.
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15 if reaped else 13]) / hz
rads = glob.glob(w + "/jobs/*.rad")
before = busy(), own(daemon, False), own(nursery, True)
start = time.perf_counter()
submit = subprocess.Popen([binary, "submit", "--spool", w + "/spool"] + rads,
                          stdout=subprocess.DEVNULL)
_, status, used = os.wait4(submit.pid, 0)
assert status == 0, "the submit failed"
while len(os.listdir(w + "/spool/done")) < n:
    time.sleep(0.005)
wall = time.perf_counter() - start
after = busy(), own(daemon, False), own(nursery, True)
all_, dmn, tree = ((a - b) * 1000 / n for a, b in zip(after, before))
jobs = sum(json.load(open(f)).get("cpu_s") or 0
           for f in glob.glob(w + "/spool/done/*/run-*/exit.json")) * 1000 / n
submit = (used.ru_utime + used.ru_stime) * 1000 / n
print("200 jobs: %.0f jobs/s, busy CPU %.2f ms per job" % (n / wall, all_))
print("  the jobs in their cgroups %.2f, their supervisors and nursery %.2f, the daemon %.2f,"
      " the submit %.2f, the rest %.2f ms" % (jobs, tree - jobs, dmn, submit,
                                            all_ - tree - dmn - submit))
PY

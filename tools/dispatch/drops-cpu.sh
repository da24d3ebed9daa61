#!/bin/bash
# 10,000 job files moved into pending/ of a fresh daemon on 2 simulated
# GPUs, both held by a long job so that every drop stays queued: wall time
# until the daemon's log says all are queued, and the CPU the daemon used
# meanwhile (all its threads, from /proc/PID/stat), which moves less than
# wall time on a busy machine. `cargo bench --bench daemon` makes the same
# burst; this script exists to alternate two builds in the same minutes:
#
#   tools/dispatch/drops-cpu.sh OLD/carma; tools/dispatch/drops-cpu.sh target/release/carma
#
# Usage: drops-cpu.sh [CARMA_BINARY] [PARENT_DIR]   (defaults:
# target/release/carma, /dev/shm; /tmp puts the spool on disk). Runs as
# root (the jobs run as the daemon's user).
set -euo pipefail
BIN=$(realpath "${1:-target/release/carma}")
W=$(mktemp -d "${2:-/dev/shm}/carma-drops.XXXXXX")
trap 'pkill -f -- "--spool $W/spool" || true; sleep 0.3; pkill -f -- "$W/spool/running" || true; rm -rf "$W"' EXIT
printf '[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n' > "$W/carma.toml"
(cd "$W" && CARMA_CONFIG="$W/carma.toml" setsid "$BIN" daemon --simulate-gpus 2x40GiB \
    --spool "$W/spool" 2>"$W/daemon.log" >/dev/null &)
while [ ! -e "$W/spool/status.json" ]; do sleep 0.01; done
DAEMON=$(pgrep -f -- "daemon --simulate-gpus 2x40GiB --spool $W/spool")
for i in 0 1; do printf 'memory: whole\nsleep 600\n' > "$W/spool/pending/hold$i.rad"; done
until [ "$(grep -c ': run 1 on GPU' "$W/daemon.log")" -ge 2 ]; do sleep 0.01; done
mkdir "$W/staged"
for i in $(seq -w 0 9999); do printf 'name: job%s\nmemory: whole\necho %s\n' "$i" "$i" > "$W/staged/job$i.rad"; done
python3 - "$W" "$DAEMON" <<'PY'
import os, sys, time
work, daemon = sys.argv[1], sys.argv[2]
def cpu_s():
    fields = open(f"/proc/{daemon}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
log = f"{work}/daemon.log"
before = open(log).read().count("queued in pending")
cpu0, t0 = cpu_s(), time.monotonic()
for name in sorted(os.listdir(f"{work}/staged")):
    os.rename(f"{work}/staged/{name}", f"{work}/spool/pending/{name}")
while open(log).read().count("queued in pending") < before + 10000:
    time.sleep(0.02)
wall, cpu = time.monotonic() - t0, cpu_s() - cpu0
print("10,000 drops: all queued after %.2f s; daemon CPU %.2f s" % (wall, cpu))
PY

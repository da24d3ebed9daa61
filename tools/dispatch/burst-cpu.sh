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
busy() { awk '/^cpu /{print $2+$3+$4+$7+$8+$9}' /proc/stat; }
b=$(busy); t0=$(date +%s.%N)
CARMA_CONFIG="$W/carma.toml" "$BIN" submit --spool "$W/spool" "$W"/jobs/*.rad > /dev/null
while [ "$(ls "$W/spool/done" | wc -l)" -lt 200 ]; do sleep 0.01; done
t1=$(date +%s.%N); a=$(busy)
python3 -c "
wall = $t1 - $t0
print('200 jobs: %.0f jobs/s, busy CPU %.2f ms per job' % (200 / wall, ($a - $b) * 1000 / $(getconf CLK_TCK) / 200))"

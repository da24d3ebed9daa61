#!/bin/bash
# A burst of 20 drops claimed right after 1.5 GB was written (not flushed)
# to the spool's file system: how long until all 20 are tasks. A claim of
# 16 or more was flushed with one syncfs, which waited for the 1.5 GB as
# well; it is now fsynced file by file where over 64 MiB waits to be
# written (src/spool/durable.rs). Runs as root; the spool is made under
# PARENT_DIR, which must be on a disk (not tmpfs) for the figure to mean
# anything. Compare two builds by alternating them:
#
#   tools/dispatch/dirty-burst.sh OLD/carma; tools/dispatch/dirty-burst.sh target/release/carma
#
# Usage: dirty-burst.sh [CARMA_BINARY] [PARENT_DIR]   (defaults:
# target/release/carma, /tmp)
set -euo pipefail
BIN=$(realpath "${1:-target/release/carma}")
W=$(mktemp -d "${2:-/tmp}/carma-dirty-burst.XXXXXX")
daemon="daemon --simulate-gpus 1x40GiB --spool $W/spool"
trap 'pkill -CONT -f -- "$daemon" || true; pkill -f -- "$daemon" || true; sleep 0.5; rm -rf "$W"' EXIT
chmod 755 "$W"
printf '[daemon]\nallow_root_jobs = true\n' > "$W/c.toml"
(CARMA_CONFIG="$W/c.toml" setsid "$BIN" $daemon 2>"$W/d.log" >/dev/null &)
for _ in $(seq 50); do [ -s "$W/spool/status.json" ] && break; sleep 0.1; done
sync
mkdir "$W/jobs"
for i in $(seq 20); do printf 'memory: 1G\nsleep 100\n' > "$W/jobs/j$i.rad"; done
dd if=/dev/zero of="$W/big" bs=1M count=1500 status=none
grep -E "^(Dirty|Writeback):" /proc/meminfo | tr -s ' \n' ' '
# The daemon is stopped while the files go in, so that it claims all 20
# in one batch.
pkill -STOP -f -- "$daemon"
mv "$W"/jobs/*.rad "$W/spool/pending/"
t0=$(date +%s.%N)
pkill -CONT -f -- "$daemon"
while [ "$(ls "$W/spool/pending" "$W/spool/running" | grep -c '^[0-9]\{6\}-')" -lt 20 ]; do sleep 0.005; done
t1=$(date +%s.%N)
echo "$(basename "$BIN"): 20 drops are tasks $(python3 -c "print(round($t1 - $t0, 3))") s after the burst"

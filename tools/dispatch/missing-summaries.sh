#!/bin/bash
# Usage: tools/dispatch/missing-summaries.sh BINARY N
# A daemon started over N drops in pending/ (a spool on /dev/shm), each
# naming a model summary that is not there: how long until it serves, and
# until every drop is claimed (they wait 5 s for their summary first).
# Each drop listed pending/ (up to 4,096 names) to look for the summary in
# another case; now one listing a turn serves them all.
BIN=$1; N=$2
D=$(mktemp -d /dev/shm/sb.XXXX)
printf '[daemon]\nallow_root_jobs = true\n' > $D/carma.toml
CARMA_CONFIG=$D/carma.toml $BIN daemon --simulate-gpus 1x40GiB --spool $D/spool 2>$D/log0 &
P=$!
while [ ! -e $D/spool/status.json ]; do sleep 0.05; done
kill -TERM $P; wait $P
python3 - "$D/spool/pending" "$N" <<'PY'
import sys, os
d, n = sys.argv[1], int(sys.argv[2])
for i in range(n):
    with open(os.path.join(d, f".j{i}.rad"), "w") as f:
        f.write("memory: 1G\nmodel: missing.txt\nsleep 7301\n")
for i in range(n):
    os.rename(os.path.join(d, f".j{i}.rad"), os.path.join(d, f"j{i}.rad"))
PY
START=$(date +%s.%N)
CARMA_CONFIG=$D/carma.toml $BIN daemon --simulate-gpus 1x40GiB --spool $D/spool 2>$D/log &
P=$!
until grep -q " serving " $D/log 2>/dev/null; do sleep 0.01; done
SERVE=$(date +%s.%N)
while ls $D/spool/pending | grep -q '^j'; do sleep 0.05; done
END=$(date +%s.%N)
echo "$(basename $BIN) N=$N: serving after $(echo "$SERVE - $START" | bc) s, every drop claimed after $(echo "$END - $START" | bc) s"
kill -TERM $P; wait $P 2>/dev/null
pkill -f "sleep 7301" 2>/dev/null
rm -rf $D

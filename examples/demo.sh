#!/usr/bin/env bash
# carma's main job on any machine, no GPU needed: a daemon on simulated GPUs
# replays a trace submitted the way users submit (staggered `carma submit`),
# places, runs and recovers the jobs, then reports.
#
#   examples/demo.sh [TRACE.csv]    GPUS=2x40GiB SCALE=0.02 POLICY=magm ESTIMATOR=oracle
set -euo pipefail
cd "$(dirname "$0")/.."
trace=${1:-examples/traces/demo.csv}
gpus=${GPUS:-2x40GiB}
scale=${SCALE:-0.02}

echo "building carma (release; a few minutes the first time) ..." >&2
cargo build --release
carma=$PWD/target/release/carma
work=$(mktemp -d "${TMPDIR:-/tmp}/carma-demo.XXXXXX")
export CARMA_SPOOL=$work/spool
export CARMA_CONFIG=$work/carma.toml
cat > "$CARMA_CONFIG" <<TOML
[placement]
policy = "${POLICY:-magm}"
smact_window_s = 5
[daemon]
sample_interval_s = 0.25
metrics_interval_s = 1
# A demo in a container often runs as root; its jobs are root's too.
allow_root_jobs = true
TOML

"$carma" daemon --simulate-gpus "$gpus" 2> "$work/daemon.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true' EXIT
until [ -e "$CARMA_SPOOL/status.json" ]; do sleep 0.1; done
echo "daemon $daemon serving $CARMA_SPOOL on $gpus simulated GPUs; log: $work/daemon.log"

"$carma" replay --trace "$trace" --time-scale "$scale" --estimator "${ESTIMATOR:-oracle}" \
    --jobs "$work/jobs" > "$work/replay.sh"
tasks=$(($(wc -l < "$trace") - 1))
echo "replaying $trace ($tasks tasks, time x $scale) ..."
sh "$work/replay.sh" > "$work/submitted.txt"

count() { find "$CARMA_SPOOL/$1" -mindepth 1 -maxdepth 1 -type d | wc -l; }
while [ $(( $(count done) + $(count failed) )) -lt "$tasks" ]; do
    printf '\r  pending %3d  recovery %3d  running %3d  done %3d  failed %3d ' \
        "$(count pending)" "$(count recovery)" "$(count running)" "$(count done)" "$(count failed)"
    sleep 1
done
echo
"$carma" status
echo
"$carma" report --csv "$work/tasks.csv" --plot "$work/plots"
echo
echo "per-task CSV: $work/tasks.csv; pictures: $work/plots; the spool stays in $work"

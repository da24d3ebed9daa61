#!/usr/bin/env bash
# An OOM crash and its recovery, on one simulated 40 GiB GPU: `medium`
# holds 8 GiB; `underestimated` declares 2 GiB, so carma places it beside
# `medium`, but it allocates 34 GiB and dies with PyTorch's out-of-memory
# message. carma moves it to recovery/, waits until the GPU is idle, and
# re-runs it alone, where it completes. Under a minute after the build.
#
#   examples/oom.sh          CARMA=path/to/carma skips the release build
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -z "${CARMA:-}" ]; then
    echo "building carma (release; a few minutes the first time) ..." >&2
    cargo build --release
    CARMA=$PWD/target/release/carma
fi
work=$(mktemp -d "${TMPDIR:-/tmp}/carma-oom.XXXXXX")
export CARMA_SPOOL=$work/spool
export CARMA_CONFIG=$work/carma.toml
cat > "$CARMA_CONFIG" <<TOML
[placement]
smact_window_s = 5
[daemon]
sample_interval_s = 0.25
# A demo in a container often runs as root; its jobs are root's too.
allow_root_jobs = true
# The jobs run \`carma fake-train\`: this carma.
job_path = "$(dirname "$CARMA"):/usr/local/bin:/usr/bin:/bin"
TOML

"$CARMA" daemon --simulate-gpus 1x40GiB 2> "$work/daemon.log" &
daemon=$!
trap 'kill -TERM $daemon 2>/dev/null || true' EXIT
until [ -e "$CARMA_SPOOL/status.json" ]; do sleep 0.1; done

"$CARMA" submit examples/fake/medium.rad examples/fake/underestimated.rad
count() { find "$CARMA_SPOOL/$1" -mindepth 1 -maxdepth 1 -type d | wc -l; }
while [ $(( $(count done) + $(count failed) )) -lt 2 ]; do sleep 1; done
grep -E 'recovery|run 2' "$work/daemon.log" | sed 's/^<[0-9]>//' || true
echo
"$CARMA" report
echo "the spool stays in $work"

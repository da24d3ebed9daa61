#!/usr/bin/env bash
# All nine steps of run.sh in one go, each under its own time limit, for a
# GPU machine lent for minutes: a step that hangs (MPS that never answers, a
# job that never ends) costs its own budget, not the rest. After each step
# the results so far are packed into OUT/results.tar.gz, so a run cut off
# from outside still leaves what it measured.
#
#   tools/real-gpu/all-steps.sh CARMA OUT [STEP:SECONDS ...]
#
# Default budgets: 1:30 3:120 2:110 4:170 5:80 6:150 7:120 8:110 9:90 (run in that order).
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
carma=$1 out=$2
shift 2
budgets=("$@")
[ ${#budgets[@]} -gt 0 ] || budgets=(1:30 3:120 2:110 4:170 5:80 6:150 7:120 8:110 9:90)
mkdir -p "$out/results"
results=$(cd "$out/results" && pwd)
{
    echo "date: $(date -u +%FT%TZ)"
    echo "kernel: $(uname -r)"
    nvidia-smi --query-gpu=name,driver_version,memory.total,compute_mode,mig.mode.current,power.limit \
        --format=csv 2>&1
    echo "nvidia-cuda-mps-control: $(command -v nvidia-cuda-mps-control || echo missing)"
    echo "dcgmi: $(command -v dcgmi || echo missing)"
    echo "python3: $(command -v python3)"
    python3 -c 'import torch, torchvision; print("torch", torch.__version__, "torchvision", torchvision.__version__, "cuda", torch.version.cuda)' 2>&1
    python3 -c 'import transformers; print("transformers", transformers.__version__)' 2>&1 | tail -1
    python3 -c 'import torchinfo, torchsummary; print("torchinfo and torchsummary present")' 2>&1 | tail -1
    echo "cgroup: $(stat -fc %T /sys/fs/cgroup) controllers: $(cat /sys/fs/cgroup/cgroup.controllers 2>/dev/null)"
    echo "LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}"
    "$carma" --version
} > "$results/environment.txt" 2>&1
cat "$results/environment.txt"
for b in "${budgets[@]}"; do
    step=${b%%:*} seconds=${b#*:}
    start=$(date +%s)
    # run.sh's own cleanup (stop the daemon, end the jobs, quit MPS) takes
    # at most about 25 s after the TERM.
    timeout -k 40 "$seconds" "$here/run.sh" --carma "$carma" --out "$results" --steps "$step"
    rc=$?
    echo "== step $step: exit $rc after $(($(date +%s) - start)) s (budget $seconds s)" | tee -a "$results/summary.txt"
    # The step's leftovers, should its own cleanup have been cut short.
    pkill -f "$here/train.py" 2>/dev/null
    for pipe in /tmp/carma-real-gpu.*/mps-pipe; do
        [ -d "$pipe" ] && echo quit | CUDA_MPS_PIPE_DIRECTORY=$pipe timeout 10 nvidia-cuda-mps-control >/dev/null 2>&1
    done
    nvidia-smi --query-gpu=compute_mode --format=csv,noheader 2>/dev/null | grep -qv Default \
        && { echo "== compute mode left at non-default; setting DEFAULT" | tee -a "$results/summary.txt"; nvidia-smi -c DEFAULT; }
    tar -czf "$out/results.tar.gz" -C "$results/.." results
    cp "$results/summary.txt" "$out/summary.txt"
done

#!/usr/bin/env bash
# carma on a real GPU (issue 27): inventory and readings against
# nvidia-smi, MPS for real, a real OOM recovered, estimates against
# measured peaks, dispatch latency. Run as root on a machine with an
# NVIDIA GPU, the driver, PyTorch (and torchvision; transformers for the
# BERT/GPT-2 rows where present). See README.md beside this script.
#
#   tools/real-gpu/run.sh [--fake] [--carma PATH] [--out DIR] [--steps LIST]
#
# --fake     no GPU: carma's fake NVML (tests/fake_nvml) and a fake
#            nvidia-smi reading the same file stand in; the steps that
#            need PyTorch and a GPU say "skipped" instead of faking a result
# --carma    the carma binary (default: target/release/carma, built if missing)
# --out      where results go (default: ./real-gpu-results)
# --steps    which steps to run (default: 1,2,3,4,5)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
fake=0
carma=""
out="$PWD/real-gpu-results"
steps="1,2,3,4,5"
while [ $# -gt 0 ]; do
    case "$1" in
        --fake) fake=1 ;;
        --carma) carma=$2; shift ;;
        --out) out=$2; shift ;;
        --steps) steps=$2; shift ;;
        -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$carma" ]; then
    carma=$repo/target/release/carma
    [ -x "$carma" ] || (cd "$repo" && cargo build --release --offline)
fi
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/carma-real-gpu.XXXXXX)
chmod 755 "$work"
daemon_pid=""
cleanup() {
    stop_daemon
    rm -rf "$work"
}
trap cleanup EXIT
want() { case ",$steps," in *",$1,"*) return 0 ;; esac; return 1; }
say() { printf '== %s\n' "$*" | tee -a "$out/summary.txt"; }
has_torch() { [ "$fake" = 0 ] && python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; }

# --- the GPU backend: real NVML, or the fake library and a fake nvidia-smi
if [ "$fake" = 1 ]; then
    mkdir -p "$work/bin"
    cc -shared -fPIC -O1 -o "$work/libnvidia-ml.so" "$repo/tests/fake_nvml/fake_nvml.c"
    export CARMA_NVML_LIB=$work/libnvidia-ml.so
    export CARMA_FAKE_NVML=$work/fake-nvml.txt
    cat > "$CARMA_FAKE_NVML" <<FAKE
gpus 1
driver 550.54.15
0.name NVIDIA H100 80GB HBM3
0.uuid GPU-00000000-fake
0.total_mib 81559
0.used_mib 512
0.util 0
0.procs
0.mig 0
0.fail 0
0.power_w 71.5
FAKE
    # nvidia-smi as far as this script asks it, from the same file.
    cat > "$work/bin/nvidia-smi" <<'SMI'
#!/usr/bin/env bash
f=$CARMA_FAKE_NVML
v() { sed -n "s/^0\.$1 //p" "$f"; }
case "$*" in
    *--query-gpu=*) echo "0, $(v name), $(v total_mib), $(v used_mib), Default, Disabled, $(v power_w)" ;;
    *--query-compute-apps=*) ;;
    *) echo "fake nvidia-smi: $*" ;;
esac
SMI
    chmod +x "$work/bin/nvidia-smi"
    export PATH=$work/bin:$PATH
fi

config=$work/carma.toml
write_config() {  # $1: mps enabled (true/false)
    cat > "$config" <<TOML
[daemon]
spool = "$work/spool"
# The kit runs as root on a machine of its own.
allow_root_jobs = true
[mps]
enabled = $1
pipe_dir = "$work/mps-pipe"
log_dir = "$work/mps-log"
TOML
}
export CARMA_CONFIG=$config CARMA_SPOOL=$work/spool

start_daemon() {
    rm -rf "$work/spool"
    RUST_LOG=info "$carma" daemon >"$work/daemon.log" 2>&1 &
    daemon_pid=$!
    for _ in $(seq 300); do
        [ -s "$work/spool/status.json" ] && return 0
        kill -0 "$daemon_pid" 2>/dev/null || break
        sleep 0.1
    done
    cat "$work/daemon.log" >&2
    echo "run.sh: the daemon did not start" >&2
    return 1
}
stop_daemon() {
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=""
    fi
}
wait_ended() {  # $1: task name, $2: seconds
    for _ in $(seq $(($2 * 10))); do
        for s in done failed; do
            [ -d "$work/spool/$s/$1" ] && { echo "$s"; return 0; }
        done
        sleep 0.1
    done
    echo "timeout"
}
job() {  # $1: file, $2: name, $3: memory, rest: script lines
    local file=$1 name=$2 memory=$3
    shift 3
    { echo "name: $name"; echo "memory: $memory"; printf '%s\n' "$@"; } > "$file"
}
smi_gpus() {
    nvidia-smi --query-gpu=index,name,memory.total,memory.used,compute_mode,mig.mode.current,power.draw \
        --format=csv,noheader,nounits
}

: > "$out/summary.txt"
say "carma on $( [ "$fake" = 1 ] && echo 'the fake NVML (no GPU)' || smi_gpus | head -1 | cut -d, -f2 )"
"$carma" --version >> "$out/summary.txt" 2>&1 || true

# --- 1. inventory and readings, carma's against nvidia-smi's
if want 1; then
    say "1. inventory and readings"
    write_config false
    start_daemon
    sleep 3
    smi_gpus > "$out/1-nvidia-smi.csv"
    "$carma" status --json > "$out/1-status.json"
    python3 "$here/compare.py" "$out/1-status.json" "$out/1-nvidia-smi.csv" | tee -a "$out/summary.txt"
    grep -E "GPU [0-9]|compute mode|MIG|GPM|DCGM" "$work/daemon.log" | head -20 >> "$out/summary.txt" || true
    stop_daemon
fi

# --- 2. MPS for real: two models collocated, each capped; one over its cap
if want 2; then
    say "2. MPS: two training jobs collocated, each with its memory limit"
    if ! has_torch; then
        say "2. skipped: no GPU with PyTorch here"
    else
        before=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
        write_config true
        start_daemon
        job "$work/a.rad" resnet50 12G "python3 $here/train.py resnet50 64 300"
        job "$work/b.rad" bert 10G "python3 $here/train.py bert-base 16 300"
        job "$work/c.rad" greedy 3G "python3 $here/train.py resnet50 32 50 --alloc-gib 6"
        a=$("$carma" submit "$work/a.rad"); b=$("$carma" submit "$work/b.rad"); c=$("$carma" submit "$work/c.rad")
        sleep 20
        "$carma" status --json > "$out/2-status-during.json"
        nvidia-smi --query-compute-apps=pid,used_memory --format=csv,noheader > "$out/2-apps.csv" || true
        during=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
        for t in "$a" "$b" "$c"; do echo "$t: $(wait_ended "$t" 900)"; done | tee -a "$out/summary.txt"
        grep -h "out of memory" "$work/spool"/*/"$c"/run-1/stderr 2>/dev/null | head -2 | tee -a "$out/summary.txt" || true
        stop_daemon
        after=$(nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1)
        say "compute mode: before $before, while carma ran $during, after $after"
        pgrep -f nvidia-cuda-mps-control >/dev/null && say "MPS control daemon still running after stop" \
            || say "MPS control daemon stopped with carma"
        cp "$work/daemon.log" "$out/2-daemon.log"
    fi
fi

# --- 3. a real OOM beside another job, recovered alone
if want 3; then
    say "3. a real OOM recovered"
    if ! has_torch; then
        say "3. skipped: no GPU with PyTorch here"
    else
        write_config true
        start_daemon
        job "$work/n.rad" neighbour 20G "python3 $here/train.py resnet50 128 400"
        job "$work/o.rad" underestimated 4G "python3 $here/train.py vit_b_16 64 100"
        n=$("$carma" submit "$work/n.rad"); o=$("$carma" submit "$work/o.rad")
        for t in "$n" "$o"; do echo "$t: $(wait_ended "$t" 1200)"; done | tee -a "$out/summary.txt"
        python3 "$here/oom_timeline.py" "$work/spool" "$o" | tee -a "$out/summary.txt"
        stop_daemon
        cp "$work/daemon.log" "$out/3-daemon.log"
    fi
fi

# --- 4. estimates against measured peaks
if want 4; then
    say "4. estimates against measured peaks"
    if ! has_torch; then
        say "4. skipped: no GPU with PyTorch here"
    else
        python3 "$here/measure.py" --carma "$carma" --out "$out/4-estimates" | tee -a "$out/summary.txt"
    fi
fi

# --- 5. dispatch latency: submit -> first line -> first CUDA kernel
if want 5; then
    say "5. dispatch latency, p50 of 20 jobs"
    for mps in false true; do
        write_config $mps
        start_daemon
        : > "$work/latency.csv"
        for i in $(seq 20); do
            if has_torch; then
                line="python3 $here/train.py resnet18 8 1"
            else
                line="python3 -c 'import json,time; print(json.dumps({\"started\": time.time(), \"first_kernel\": None}))'"
            fi
            job "$work/l$i.rad" "lat$i" 2G "$line"
            t0=$(date +%s.%N)
            name=$("$carma" submit "$work/l$i.rad")
            [ "$(wait_ended "$name" 300)" = done ] || { echo "$name did not succeed" >&2; continue; }
            echo "$t0,$(tail -1 "$work/spool/done/$name/run-1/stdout")" >> "$work/latency.csv"
        done
        python3 - "$work/latency.csv" "$mps" <<'PY' | tee -a "$out/summary.txt"
import json, statistics, sys
first, kernel = [], []
for row in open(sys.argv[1]):
    t0, _, rest = row.partition(",")
    r = json.loads(rest)
    first.append(r["started"] - float(t0))
    if r.get("first_kernel"):
        kernel.append(r["first_kernel"] - float(t0))
p50 = lambda xs: f"{statistics.median(xs) * 1000:.0f} ms" if xs else "n/a (no GPU)"
print(f"MPS {'on ' if sys.argv[2] == 'true' else 'off'}: submit -> first line p50 {p50(first)}, "
      f"-> first CUDA kernel p50 {p50(kernel)} ({len(first)} jobs)")
PY
        stop_daemon
        [ "$fake" = 1 ] && break
    done
fi
say "results in $out"

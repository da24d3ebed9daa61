#!/usr/bin/env bash
# carma on a real GPU (issue 27): inventory and readings against
# nvidia-smi, MPS for real, a real OOM recovered, estimates against
# measured peaks, dispatch latency, jobs of two users, jobs stopped by
# their time limit and by a cancellation, and host limits enforced in a
# cgroup of the daemon's own. Run as root on a machine with an
# NVIDIA GPU, the driver, PyTorch and torchvision (transformers for the
# BERT/GPT-2 rows, torchinfo and torchsummary for those summaries, where
# present). See README.md beside this script.
#
#   tools/real-gpu/run.sh [--fake] [--carma PATH] [--out DIR] [--steps LIST]
#
# --fake     no GPU: carma's fake NVML (tests/fake_nvml) and a fake
#            nvidia-smi reading the same file stand in, and a stand-in
#            trainer runs the jobs of steps 2, 3, 7 and 8 (checking the kit's
#            plumbing); step 4 says "skipped" instead of faking a result
# --carma    the carma binary (default: target/release/carma, built if missing)
# --out      where results go (default: ./real-gpu-results); summary.txt
#            there is appended to, so steps can be run one call each
# --steps    which steps to run (default: 1,2,3,4,5,6,7,8,9)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
fake=0
carma=""
out="$PWD/real-gpu-results"
steps="1,2,3,4,5,6,7,8,9"
while [ $# -gt 0 ]; do
    case "$1" in
        --fake) fake=1 ;;
        --carma) carma=$2; shift ;;
        --out) out=$2; shift ;;
        --steps) steps=$2; shift ;;
        -h|--help) sed -n '2,19p' "$0"; exit 0 ;;
        *) echo "run.sh: unknown argument $1" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$carma" ]; then
    carma=$repo/target/release/carma
    [ -x "$carma" ] || (cd "$repo" && cargo build --release --offline)
fi
carma=$(cd "$(dirname "$carma")" && pwd)/$(basename "$carma")
mkdir -p "$out"
out=$(cd "$out" && pwd)
work=$(mktemp -d /tmp/carma-real-gpu.XXXXXX)
chmod 755 "$work"
daemon_pid=""
# The python that holds PyTorch: a job gets a login's PATH, not this
# shell's, so its lines name it whole (and export the library path the
# driver may need).
py=$(command -v python3)
mps_control=$(command -v nvidia-cuda-mps-control || ls /usr/local/nvidia/bin/nvidia-cuda-mps-control 2>/dev/null || true)
stop_daemon() {  # asks, then after 10 s forces: a step's time limit must not run out here
    if [ -n "$daemon_pid" ]; then
        kill -TERM "$daemon_pid" 2>/dev/null || true
        for _ in $(seq 100); do kill -0 "$daemon_pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$daemon_pid" 2>/dev/null || true
        wait "$daemon_pid" 2>/dev/null || true
        daemon_pid=""
    fi
}
made_users=()
cleanup() {
    stop_daemon
    for u in "${made_users[@]}"; do userdel -r "$u" >/dev/null 2>&1 || true; done
    # A step cut off by its time limit still leaves its daemon's log.
    [ -s "$work/daemon.log" ] && cp "$work/daemon.log" "$out/last-daemon.log"
    # What a step leaves behind must not reach the next one: its jobs and
    # an MPS daemon (carma restores the compute mode when MPS stops).
    pkill -f "$here/train.py" 2>/dev/null || true
    pkill -f "$work/bin/fake-train" 2>/dev/null || true
    if [ -n "$mps_control" ] && [ -d "$work/mps-pipe" ]; then
        echo quit | CUDA_MPS_PIPE_DIRECTORY=$work/mps-pipe timeout 10 "$mps_control" >/dev/null 2>&1 || true
    fi
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 143' TERM INT
want() { case ",$steps," in *",$1,"*) return 0 ;; esac; return 1; }
say() { printf '== %s\n' "$*" | tee -a "$out/summary.txt"; }
torch_ok=0
if [ "$fake" = 0 ] && "$py" -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    torch_ok=1
fi
# Steps 2, 3 and 5 run a real trainer on the GPU or, with --fake, a
# stand-in that prints what train.py prints and fails its first run with
# CUDA's out-of-memory message when asked to hold memory.
has_trainer() { [ "$torch_ok" = 1 ] || [ "$fake" = 1 ]; }
if [ "$fake" = 1 ]; then train="$work/bin/fake-train"; else train="$py $here/train.py"; fi

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
    *--query-gpu=compute_mode*) echo "Default" ;;
    *--query-gpu=*) echo "0, $(v name), $(v total_mib), $(v used_mib), Default, Disabled, $(v power_w), 0" ;;
    *--query-compute-apps=*) ;;
    *) echo "fake nvidia-smi: $*" ;;
esac
SMI
    cat > "$work/bin/fake-train" <<FAKE
#!/usr/bin/env bash
python3 -c 'import json,time; print(json.dumps({"started": time.time()}))'
case "\$*" in
    *--alloc-gib*) [ -e "$work/fake-oomed" ] || { touch "$work/fake-oomed"
        echo "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 6.00 GiB" >&2; exit 1; } ;;
    *--forever*) exec sleep 600 ;;
esac
sleep 1
python3 -c 'import json,time; t=time.time(); print(json.dumps({"started": t, "first_kernel": t, "ended": t}))'
FAKE
    chmod +x "$work/bin/nvidia-smi" "$work/bin/fake-train"
    export PATH=$work/bin:$PATH
fi

config=$work/carma.toml
write_config() {  # $1: mps enabled (true/false); more: lines for [daemon]
    local mps=$1
    shift
    if [ "$mps" = true ] && [ -z "$mps_control" ]; then
        say "no nvidia-cuda-mps-control on PATH: MPS off"
        mps=false
    fi
    cat > "$config" <<TOML
[daemon]
spool = "$work/spool"
# The kit runs as root on a machine of its own.
allow_root_jobs = true
job_path = "$(dirname "$py"):/usr/local/bin:/usr/bin:/bin"
$(printf '%s\n' "$@")
[mps]
enabled = $mps
control = "${mps_control:-nvidia-cuda-mps-control}"
pipe_dir = "$work/mps-pipe"
log_dir = "$work/mps-log"
TOML
}
export CARMA_CONFIG=$config CARMA_SPOOL=$work/spool

start_daemon() {  # $1: a cgroup v2 directory to start it in, alone (optional)
    rm -rf "$work/spool"
    if [ -n "${1:-}" ]; then
        RUST_LOG=info sh -c 'echo $$ > "$1/cgroup.procs" && exec "$2" daemon' sh "$1" "$carma" \
            >"$work/daemon.log" 2>&1 &
    else
        RUST_LOG=info "$carma" daemon >"$work/daemon.log" 2>&1 &
    fi
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
    {
        echo "name: $name"
        echo "memory: $memory"
        if [ -n "${LD_LIBRARY_PATH:-}" ]; then echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; fi
        printf '%s\n' "$@"
    } > "$file"
}
smi_gpus() {
    nvidia-smi --query-gpu=index,name,memory.total,memory.used,compute_mode,mig.mode.current,power.draw,memory.reserved \
        --format=csv,noheader,nounits
}
compute_mode() { nvidia-smi --query-gpu=compute_mode --format=csv,noheader | head -1; }
keep_log() { cp "$work/daemon.log" "$out/$1-daemon.log"; }

say "carma on $( [ "$fake" = 1 ] && echo 'the fake NVML (no GPU)' || smi_gpus | head -1 | cut -d, -f2 ), steps $steps"

# --- 1. inventory and readings, carma's against nvidia-smi's
if want 1; then
    say "1. inventory and readings"
    write_config false
    start_daemon
    sleep 3
    smi_gpus > "$out/1-nvidia-smi.csv"
    "$carma" status --json > "$out/1-status.json"
    python3 "$here/compare.py" "$out/1-status.json" "$out/1-nvidia-smi.csv" | tee -a "$out/summary.txt" || true
    grep -E "GPU [0-9]|compute mode|MIG|GPM|DCGM|NVML" "$work/daemon.log" | head -20 >> "$out/summary.txt" || true
    stop_daemon
    keep_log 1
fi

# --- 2. MPS for real: two models collocated, each capped; one over its cap
if want 2; then
    say "2. MPS: two training jobs collocated, each with its memory limit"
    if ! has_trainer; then
        say "2. skipped: no GPU with PyTorch here"
    else
        before=$(compute_mode)
        write_config true
        start_daemon
        job "$work/a.rad" resnet50 14G "$train resnet50 64 200"
        job "$work/b.rad" bert 10G "$train bert-base 16 200"
        job "$work/c.rad" greedy 3G "$train resnet50 32 30 --alloc-gib 6"
        a=$("$carma" submit "$work/a.rad"); b=$("$carma" submit "$work/b.rad"); c=$("$carma" submit "$work/c.rad")
        sleep 12
        "$carma" status --json > "$out/2-status-during.json"
        nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader > "$out/2-apps.csv" || true
        during=$(compute_mode)
        for t in "$a" "$b" "$c"; do echo "$t: $(wait_ended "$t" 240)"; done | tee -a "$out/summary.txt"
        python3 "$here/oom_timeline.py" "$work/spool" "$c" | tee -a "$out/summary.txt" || true
        stop_daemon
        after=$(compute_mode)
        say "compute mode: before $before, while carma ran $during, after $after"
        if pgrep -f nvidia-cuda-mps-control >/dev/null; then say "MPS control daemon still running after stop"
        else say "MPS control daemon stopped with carma"; fi
        keep_log 2
    fi
fi

# --- 3. a real OOM beside another job, recovered alone
if want 3; then
    say "3. a real OOM recovered"
    if ! has_trainer; then
        say "3. skipped: no GPU with PyTorch here"
    else
        rm -f "$work/fake-oomed"
        write_config true
        start_daemon
        job "$work/n.rad" neighbour 28G "$train resnet50 128 250"
        job "$work/o.rad" underestimated 4G "$train vit_b_16 64 60 --alloc-gib 0.5"
        n=$("$carma" submit "$work/n.rad"); o=$("$carma" submit "$work/o.rad")
        for t in "$n" "$o"; do echo "$t: $(wait_ended "$t" 300)"; done | tee -a "$out/summary.txt"
        python3 "$here/oom_timeline.py" "$work/spool" "$o" | tee -a "$out/summary.txt" || true
        stop_daemon
        keep_log 3
    fi
fi

# --- 4. estimates against measured peaks
if want 4; then
    say "4. estimates against measured peaks"
    if [ "$torch_ok" = 0 ]; then
        say "4. skipped: no GPU with PyTorch here"
    else
        write_config false  # carma estimate reads the kit's configuration too
        "$py" "$here/measure.py" --carma "$carma" --out "$out/4-estimates" | tee -a "$out/summary.txt"
    fi
fi

# --- 5. dispatch latency: submit -> first line (20 jobs that print the time
# and end) and -> first CUDA kernel (8 jobs that start PyTorch), MPS off and on
if want 5; then
    say "5. dispatch latency"
    for mps in false true; do
        write_config $mps
        start_daemon
        : > "$work/latency.csv"
        for i in $(seq 28); do
            if [ "$i" -le 20 ] || ! has_trainer; then
                line="$py -c 'import json,time; print(json.dumps({\"started\": time.time()}))'"
            else
                line="$train resnet18 8 1"
            fi
            job "$work/l$i.rad" "lat$i" 2G "$line"
            t0=$(date +%s.%N)
            name=$("$carma" submit "$work/l$i.rad")
            [ "$(wait_ended "$name" 60)" = done ] || { echo "$name did not succeed" >&2; continue; }
            echo "$t0,$(tail -1 "$work/spool/done/$name/run-1/stdout")" >> "$work/latency.csv"
            [ "$i" -ge 20 ] && ! has_trainer && break
        done
        python3 - "$work/latency.csv" "$mps" <<'PY' | tee -a "$out/summary.txt" || say "5. the latencies could not be read"
import json, statistics, sys
first, kernel = [], []
for row in open(sys.argv[1]):
    t0, _, rest = row.partition(",")
    r = json.loads(rest)
    if r.get("first_kernel"):
        kernel.append(r["first_kernel"] - float(t0))
    else:
        first.append(r["started"] - float(t0))
p50 = lambda xs: f"{statistics.median(xs) * 1000:.0f} ms (min {min(xs) * 1000:.0f}, max {max(xs) * 1000:.0f}, {len(xs)} jobs)" if xs else "n/a"
print(f"MPS {'on ' if sys.argv[2] == 'true' else 'off'}: submit -> first line p50 {p50(first)}; "
      f"-> first CUDA kernel p50 {p50(kernel)}")
PY
        stop_daemon
        keep_log "5-mps-$mps"
        [ "$fake" = 1 ] && break
    done
fi
# --- 6. carma's main job end to end: jobs that declare no memory, each with
# the torchinfo summary a user would paste, estimated, capped under MPS and
# collocated; an underestimate shows as an OOM crash and its re-run
if want 6; then
    say "6. estimated jobs collocated under MPS"
    if [ "$torch_ok" = 0 ]; then
        say "6. skipped: no GPU with PyTorch here"
    else
        write_config true
        start_daemon
        names=() summaries=()
        for spec in resnet50:128 mobilenet_v3_large:256 vit_b_16:64 convnext_tiny:96 bert-base:32; do
            model=${spec%%:*} batch=${spec#*:}
            dir=$work/est/$model
            mkdir -p "$dir"
            "$py" "$here/train.py" "$model" 1 0 --summaries "$dir" >/dev/null 2>&1 &
            summaries+=($!)
        done
        # These alone: a bare `wait` would wait for the daemon too. A model
        # whose summary could not be made is skipped below.
        wait "${summaries[@]}" || true
        for spec in resnet50:128 mobilenet_v3_large:256 vit_b_16:64 convnext_tiny:96 bert-base:32; do
            model=${spec%%:*} batch=${spec#*:}
            dir=$work/est/$model
            if [ ! -s "$dir/$model.torchinfo.txt" ]; then
                say "$model: no torchinfo summary (torchinfo or transformers missing?): skipped"
                continue
            fi
            cp "$dir/$model.torchinfo.txt" "$dir/model.txt"
            {
                echo "name: $model"
                echo "model: model.txt"
                echo "batch_size: $batch"
                if [ -n "${LD_LIBRARY_PATH:-}" ]; then echo "export LD_LIBRARY_PATH=$LD_LIBRARY_PATH"; fi
                echo "$train $model $batch 60"
            } > "$dir/job.rad"
            names+=("$("$carma" submit "$dir/job.rad")")
        done
        for t in "${names[@]}"; do echo "$t: $(wait_ended "$t" 240)"; done | tee -a "$out/summary.txt"
        for t in "${names[@]}"; do
            grep -E "$t: (estimate|run [0-9]+ on|done|failed|out of GPU)" "$work/daemon.log" | cut -c22- | cut -c1-200 || true
            python3 "$here/oom_timeline.py" "$work/spool" "$t" || true
        done | tee -a "$out/summary.txt"
        stop_daemon
        keep_log 6
    fi
fi
# --- 7. two users under MPS: an MPS server serves one user at a time, so
# on one GPU carma runs their jobs one user after the other (without MPS
# they may share it). Needs root: it makes two users, and removes them.
if want 7; then
    say "7. jobs of two users"
    if ! has_trainer; then
        say "7. skipped: no GPU with PyTorch here"
    elif [ "$(id -u)" != 0 ]; then
        say "7. skipped: needs root"
    else
        write_config true
        start_daemon
        names=()
        for u in carma-gpu-a carma-gpu-b; do
            id "$u" >/dev/null 2>&1 || { useradd -m -s /bin/bash "$u" && made_users+=("$u"); }
            mkdir -p "$work/$u"
            job "$work/$u/job.rad" "$u" 4G "$train resnet18 32 150"
            chown -R "$u:" "$work/$u"
            names+=("$(cd "$work/$u" && setpriv --reuid="$u" --regid="$u" --init-groups "$carma" submit job.rad)")
        done
        for t in "${names[@]}"; do echo "$t: $(wait_ended "$t" 240)"; done | tee -a "$out/summary.txt"
        grep -hE "($(IFS='|'; echo "${names[*]}")): run [0-9]+ on" "$work/daemon.log" | cut -c22- | cut -c1-160 | tee -a "$out/summary.txt" || true
        python3 - "$work/spool" "${names[@]}" <<'PY' | tee -a "$out/summary.txt" || say "7. the runs could not be read"
import json, pathlib, sys
spool, names = pathlib.Path(sys.argv[1]), sys.argv[2:]
spans = []
for name in names:
    run = next((spool / s / name / "run-1" for s in ("done", "failed") if (spool / s / name).is_dir()), None)
    if run is None:
        print(f"{name}: did not end")
        continue
    start = json.loads((run / "launch.json").read_text())["launched_at"]
    end = json.loads((run / "exit.json").read_text())["ended_at"]
    spans.append((start, end))
    print(f"{name}: ran {start:.1f} to {end:.1f}")
if len(spans) == 2:
    (a0, a1), (b0, b1) = sorted(spans)
    print(f"the two users' jobs {'overlapped' if b0 < a1 else 'ran one after the other'}")
PY
        stop_daemon
        keep_log 7
    fi
fi
# --- 8. stops: a training job past its time limit and one cancelled,
# under MPS; the GPU is left without their processes, and the MPS server
# still serves the next job
if want 8; then
    say "8. a time limit and a cancellation under MPS"
    if ! has_trainer; then
        say "8. skipped: no GPU with PyTorch here"
    else
        write_config true "time_limit_grace_s = 5" "cancel_grace_s = 5"
        start_daemon
        if [ "$fake" = 1 ]; then long="$train --forever"; else long="$train resnet50 64 1000000"; fi
        # job() writes the script right after the keys; these need one more.
        job "$work/t.rad" timed 12G "$long"
        sed -i 's/^memory: 12G$/memory: 12G\ntime: 20s/' "$work/t.rad"
        job "$work/c.rad" cancelled 12G "$long"
        t=$("$carma" submit "$work/t.rad"); c=$("$carma" submit "$work/c.rad")
        # Cancelled once it has run a while (PyTorch up, its memory held).
        for _ in $(seq 300); do
            [ -s "$work/spool/running/$c/run-1/stdout" ] && break
            sleep 0.1
        done
        sleep 10
        "$carma" cancel "$c" | tee -a "$out/summary.txt"
        for name in "$t" "$c"; do echo "$name: $(wait_ended "$name" 120)"; done | tee -a "$out/summary.txt"
        python3 - "$work/spool" "$t" "$c" <<'PY' | tee -a "$out/summary.txt" || say "8. the runs could not be read"
import json, pathlib, sys
spool = pathlib.Path(sys.argv[1])
for name in sys.argv[2:]:
    task = spool / "failed" / name
    if not task.is_dir():
        print(f"{name}: not in failed/")
        continue
    exit = json.loads((task / "run-1" / "exit.json").read_text())
    reason = (task / "reason").read_text().strip()
    print(f"{name}: {reason}; timed out {exit['timed_out']}, cancelled {exit['cancelled']}, "
          f"signal {exit['signal']}, ran {exit['ended_at'] - exit['started_at']:.1f} s")
PY
        # The GPU holds no process of theirs (under MPS, its server is one).
        left=$(nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader 2>/dev/null \
            | { grep -v -e "^$" -e "mps-server" || true; } | wc -l)
        echo "compute processes left on the GPU: $left" | tee -a "$out/summary.txt"
        job "$work/a.rad" after 2G "$train resnet18 8 20"
        a=$("$carma" submit "$work/a.rad")
        echo "$a (after the stops, same MPS server): $(wait_ended "$a" 120)" | tee -a "$out/summary.txt"
        stop_daemon
        keep_log 8
    fi
fi
# --- 9. host limits: the daemon alone in a cgroup with the cpu, memory
# and pids controllers (what systemd's Delegate=yes gives the unit), and
# jobs that ask for cpus:, host_memory: and more processes than
# queue.max_processes
if want 9; then
    say "9. host limits in a cgroup of the daemon's own"
    # A cgroup of its own under the root, which gives every child the
    # controllers it has on (a cgroup that holds processes cannot).
    root=/sys/fs/cgroup
    kit=$root/carma-kit-$$
    if ! [ -f "$root/cgroup.subtree_control" ] || \
        [ "$(tr ' ' '\n' < "$root/cgroup.subtree_control" | grep -cx -e cpu -e memory -e pids)" != 3 ]; then
        say "9. skipped: the cgroup v2 root here does not give its children the cpu, memory and pids controllers"
    else
        if ! mkdir "$kit"; then
            say "9. skipped: cannot make $kit"
        else
            write_config false
            printf '[queue]\nmax_processes = 64\n' >> "$config"
            start_daemon "$kit"
            grep -E "jobs run in cgroups|controller" "$work/daemon.log" | cut -c22- | tee -a "$out/summary.txt"
            job "$work/f.rad" forks 1G "$py -c 'import os, time
n, failed = 0, None
while n < 200 and failed is None:
    try:
        pid = os.fork()
    except OSError as e:
        failed = e.strerror
        break
    if pid == 0:
        time.sleep(20)
        os._exit(0)
    n += 1
print(\"forked\", n, \"children; then:\", failed)
'"
            job "$work/m.rad" memory 1G "$py -c 'x = b\"x\" * (1 << 30); print(\"held 1 GiB\")'"
            sed -i 's/^memory: 1G$/memory: 1G\nhost_memory: 256M/' "$work/m.rad"
            job "$work/u.rad" cpu 1G "$py -c 'import time, resource
t = time.time()
while time.time() - t < 4:
    pass
print(\"CPU seconds in 4 s of wall time:\", round(resource.getrusage(resource.RUSAGE_SELF).ru_utime, 2))
'"
            sed -i 's/^memory: 1G$/memory: 1G\ncpus: 0.5/' "$work/u.rad"
            names=()
            for f in f m u; do names+=("$("$carma" submit "$work/$f.rad")"); done
            for t in "${names[@]}"; do echo "$t: $(wait_ended "$t" 60)"; done | tee -a "$out/summary.txt"
            python3 - "$work/spool" "${names[@]}" <<'PY' | tee -a "$out/summary.txt" || say "9. the runs could not be read"
import json, pathlib, sys
spool = pathlib.Path(sys.argv[1])
for name in sys.argv[2:]:
    task = next((spool / s / name for s in ("done", "failed") if (spool / s / name).is_dir()), None)
    if task is None:
        print(f"{name}: did not end")
        continue
    exit = json.loads((task / "run-1" / "exit.json").read_text())
    said = (task / "run-1" / "stdout").read_text().strip().replace("\n", " / ")
    print(f"{name}: exit {exit['code']}, signal {exit['signal']}, host peak {exit.get('host_peak_mib')} MiB, "
          f"cpu {exit.get('cpu_s')} s, OOM kills {exit.get('host_oom_kills')}; said: {said or '(nothing)'}")
    if (task / "reason").exists():
        print(f"{name}: reason: {(task / 'reason').read_text().strip()[:160]}")
PY
            stop_daemon
            keep_log 9
            # The daemon removed its jobs' cgroups; its own leaf stays.
            find "$kit" -mindepth 1 -depth -type d -exec rmdir {} + 2>/dev/null || true
            rmdir "$kit" 2>/dev/null || true
        fi
    fi
fi
say "results in $out"

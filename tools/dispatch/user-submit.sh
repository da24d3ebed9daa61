#!/bin/bash
# Median wall time of 25 `carma submit` processes run as `nobody`
# against a fresh root daemon on 4 simulated GPUs: the whole command,
# from its start to its exit with the task's name (its receipt). Beside
# it, the same start of `/bin/true` (what spawning costs here) and, where
# strace is installed, how long the daemon takes to answer: 15 more
# submits traced on their socket reads alone, which the daemon's time
# does not include. Runs as root. Compare two builds by alternating them:
#
#   tools/dispatch/user-submit.sh OLD/carma; tools/dispatch/user-submit.sh target/release/carma
#
# Usage: user-submit.sh [CARMA_BINARY] [PARENT_DIR]   (defaults:
# target/release/carma, /tmp)
set -euo pipefail
BIN=$(realpath "${1:-target/release/carma}")
WORK=$(mktemp -d "${2:-/tmp}/carma-user-submit.XXXXXX")
trap 'pkill -f -- "--spool $WORK/spool" || true; rm -rf "$WORK"' EXIT
chmod 755 "$WORK"
mkdir "$WORK/user" && chown nobody "$WORK/user"
printf '[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n' > "$WORK/carma.toml"
printf 'memory: 1G\ntrue\n' > "$WORK/user/job.rad" && chown nobody "$WORK/user/job.rad"
(cd "$WORK" && CARMA_CONFIG="$WORK/carma.toml" setsid "$BIN" daemon --simulate-gpus 4x40GiB \
    --spool "$WORK/spool" 2>"$WORK/daemon.log" >/dev/null &)
sleep 1.2
cd "$WORK/user"
python3 - "$BIN" "$WORK" <<'PY'
import os, re, shutil, statistics, subprocess, sys, time
binary, work = sys.argv[1], sys.argv[2]
nobody = 65534
def demote():
    os.setgid(nobody)
    os.setgroups([])
    os.setuid(nobody)
times = []
for _ in range(25):
    start = time.perf_counter()
    subprocess.run([binary, "submit", "--spool", f"{work}/spool", "job.rad"],
                   env={"CARMA_CONFIG": f"{work}/carma.toml", "PATH": "/usr/bin:/bin"},
                   preexec_fn=demote, stdout=subprocess.DEVNULL, check=True)
    times.append(time.perf_counter() - start)
    time.sleep(0.1)
print("one submit as nobody: p50 %.1f ms, min %.1f ms" % (
    statistics.median(times) * 1e3, min(times) * 1e3))
spawn = []
for _ in range(25):
    start = time.perf_counter()
    subprocess.run(["/bin/true"], preexec_fn=demote, check=True)
    spawn.append(time.perf_counter() - start)
print("/bin/true started the same way: p50 %.2f ms" % (statistics.median(spawn) * 1e3))
strace = shutil.which("strace")
if strace:
    waits = []
    for i in range(15):
        trace = f"{work}/user/recv{i}.strace"
        subprocess.run([strace, "-T", "-e", "trace=recvfrom", "-o", trace, binary, "submit",
                        "--spool", f"{work}/spool", "job.rad"],
                       env={"CARMA_CONFIG": f"{work}/carma.toml", "PATH": "/usr/bin:/bin"},
                       preexec_fn=demote, stdout=subprocess.DEVNULL, check=True)
        for line in open(trace):
            if 'taken' in line:
                waits.append(float(re.search(r"<([\d.]+)>$", line.strip()).group(1)))
        time.sleep(0.1)
    if waits:
        print("the daemon's answer: p50 %.2f ms (%.2f-%.2f) of %d" % (
            statistics.median(waits) * 1e3, min(waits) * 1e3, max(waits) * 1e3, len(waits)))
PY

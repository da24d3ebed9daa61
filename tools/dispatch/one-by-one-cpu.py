#!/usr/bin/env python3
# 200 trivial jobs, each handed over by a submitting process of its own,
# to carma (a fresh daemon on 4 simulated GPUs) or to task-spooler (4
# slots), spool on tmpfs: jobs per second until every job has left its
# mark, and the whole machine's busy CPU (/proc/stat) per job, the
# submitting processes included. Runs as root (carma's jobs run as the
# daemon's user). Alternate the two on a machine otherwise idle:
#
#   tools/dispatch/one-by-one-cpu.py tsp; tools/dispatch/one-by-one-cpu.py carma target/release/carma
import glob, os, subprocess, sys, tempfile, time, shutil
hz, n = os.sysconf("SC_CLK_TCK"), 200
def busy():
    with open("/proc/stat") as f:
        cpu = [int(x) for x in f.readline().split()[1:]]
    return sum(cpu[i] for i in (0, 1, 2, 5, 6, 7)) / hz
w = tempfile.mkdtemp(dir="/dev/shm")
marks = os.path.join(w, "marks"); os.mkdir(marks)
try:
    if sys.argv[1] == "tsp":
        env = dict(os.environ, TS_SOCKET=w + "/tsp.socket", TMPDIR=w, TS_MAXFINISHED="100000")
        subprocess.run(["tsp", "-S", "4"], env=env, check=True, stdout=subprocess.DEVNULL)
        cmds = [["tsp", "sh", "-c", f": > {marks}/{i}"] for i in range(n)]
    else:
        binary = sys.argv[2]
        with open(w + "/carma.toml", "w") as f:
            f.write("[daemon]\nallow_root_jobs = true\nsample_interval_s = 1.0\n")
        env = dict(os.environ, CARMA_CONFIG=w + "/carma.toml")
        os.mkdir(w + "/jobs")
        for i in range(n):
            with open(f"{w}/jobs/b{i}.rad", "w") as f:
                f.write(f"memory: 1G\n: > {marks}/{i}\n")
        subprocess.Popen([binary, "daemon", "--simulate-gpus", "4x40GiB", "--spool", w + "/spool"],
                         env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        time.sleep(1.5)
        cmds = [[binary, "submit", "--spool", w + "/spool", f"{w}/jobs/b{i}.rad"] for i in range(n)]
    b, t = busy(), time.perf_counter()
    for c in cmds:
        subprocess.run(c, env=env, stdout=subprocess.DEVNULL, check=True)
    while len(os.listdir(marks)) < n:
        time.sleep(0.005)
    wall, a = time.perf_counter() - t, busy()
    print("%s: 200 jobs one by one: %.0f jobs/s, busy CPU %.2f ms per job" % (sys.argv[1], n / wall, (a - b) * 1000 / n))
finally:
    if sys.argv[1] == "tsp":
        subprocess.run(["tsp", "-K"], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    else:
        subprocess.run(["pkill", "-f", "--", "--spool " + w + "/spool"])
        time.sleep(0.3)
    shutil.rmtree(w, ignore_errors=True)

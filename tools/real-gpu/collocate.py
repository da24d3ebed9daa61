#!/usr/bin/env python3
"""What training jobs do to each other on one GPU: speed, SM activity and
memory, alone and collocated, under MPS and under time-slicing (issue 29).

The simulator's sharing model (src/simulate/model.rs) gives a task beside
others the speed

    min(1, 1 / sum(smact)) / (1 + k * (1 - own smact) * sum(others' smact))

with k fitted to a published pair and to the paper's trace-time headlines,
and assumes a shared GPU loses `fragmentation_mib`. This kit measures them.

    collocate.py run --carma CARMA --out DIR [--phase-s 8] [--fake]
    collocate.py analyse DIR
    collocate.py fit DIR [DIR ...]

`run` (as root, on the GPU machine) starts `carma daemon` on the real NVML
to log each GPU's SM activity (GPM) and each process's memory every 0.5 s,
then, once under MPS and once time-sliced, starts two workers of each of
three jobs (light, medium, heavy) that train on synthetic data and follow
one schedule of phases: each job alone, then pairs, a triple and all six,
each job recording the end of every step. Under MPS it then runs the heavy
job capped (`CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`) at fractions of its peak:
how far below the peak NVML reports can a job still run? `--fake` runs
the plumbing with stand-in workers and simulated GPUs (no GPU, no torch).

`analyse` turns DIR into tables: each job's speed in each phase against
alone, the GPU's SM activity, k fitted to every observation and the
model's prediction with it, and memory (per process, the GPU's total
against the sum of its processes). `fit` says how well SM activity alone
predicts the speeds of several runs: the rms error of the simulator's
form and of two others.
"""
import argparse
import csv
import json
import math
import os
import pathlib
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent

# Three jobs spanning SM activity on a Hopper GPU: small kernels that
# leave the SMs idle between launches, a mid-sized CNN, a heavy one.
# `--jobs` names others: MODEL:BATCH[:STALL_MS], where a stall is time on
# the CPU before each step (a data loader in the training loop).
JOBS = "light=mobilenet_v3_small:32,medium=resnet18:64,heavy=resnet50:128"
WORKERS = ["light1", "light2", "medium1", "medium2", "heavy1", "heavy2"]
PHASES = [
    ["light1"], ["medium1"], ["heavy1"],
    ["light1", "heavy1"], ["medium1", "heavy1"], ["heavy1", "heavy2"],
    ["light1", "light2"], ["light1", "medium1"], ["medium1", "medium2"],
    ["light1", "medium1", "heavy1"], WORKERS, ["heavy1"], ["light1"],
]
# Steps ending in a phase's first second are not counted: the step that
# ran across the boundary belongs to the phase before.
TRIM_S = 1.0
SQUEEZE = [1.0, 0.9, 0.8, 0.7, 0.6, 0.5]
SQUEEZE_STEPS = 30


def job_of(worker):
    return worker.rstrip("0123456789")


def parse_jobs(text):
    """`light=MODEL:BATCH[:STALL_MS],medium=...,heavy=...` as a dict."""
    jobs = {}
    for item in text.split(","):
        job, _, spec = item.partition("=")
        parts = spec.split(":")
        if job not in ("light", "medium", "heavy") or len(parts) not in (2, 3):
            raise SystemExit(f"collocate: --jobs: {item!r}: expected light|medium|heavy=MODEL:BATCH[:STALL_MS]")
        jobs[job] = {"model": parts[0], "batch": int(parts[1]),
                     "stall_ms": float(parts[2]) if len(parts) == 3 else 0.0}
    if len(jobs) != 3:
        raise SystemExit("collocate: --jobs names light, medium and heavy")
    return jobs


# --- the worker: one training job following the schedule ------------------

def worker(args):
    out = pathlib.Path(args.out)
    record = {"worker": args.name, "pid": os.getpid(), "started": time.time()}
    if args.fake:
        step = fake_step
        memory = lambda: (0, 0, 0)  # noqa: E731
    else:
        step, memory = torch_step(args.model, args.batch, args.stall_ms / 1000.0)
    warmup = []
    for _ in range(args.warmup_steps):
        step()
        warmup.append((time.time(), *memory()))
    record["warmup"] = warmup
    (out / f"{args.name}.ready").touch()
    if args.steps:  # a fixed number of steps, no schedule (the squeeze)
        for _ in range(args.steps):
            step()
    else:
        record["steps"] = follow(pathlib.Path(args.schedule), args.name, step)
    record["ended"] = time.time()
    reserved, allocated, _ = memory()
    record["max_reserved_mib"], record["max_allocated_mib"] = reserved, allocated
    (out / f"{args.name}.json").write_text(json.dumps(record))
    return 0


def follow(schedule_file, name, step):
    """Steps while the schedule has this worker active; the end of each."""
    while not schedule_file.exists():
        time.sleep(0.01)
    phases = json.loads(schedule_file.read_text())
    ends = []
    for phase in phases:
        if name not in phase["active"]:
            continue
        while time.time() < phase["start"]:
            time.sleep(0.002)
        while time.time() < phase["end"]:
            step()
            ends.append(time.time())
    return ends


def fake_step():
    time.sleep(0.02)


def torch_step(model_name, batch, stall_s):
    sys.path.insert(0, str(HERE))
    import torch
    from train import build

    model, inputs, hf = build(model_name)
    device = torch.device("cuda")
    model = model.to(device).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()

    def step():
        if stall_s:
            time.sleep(stall_s)
        data = inputs(batch, device)
        if hf:
            loss = model(**data).loss
        else:
            out = model(data["x"])
            loss = loss_fn(out.logits if hasattr(out, "logits") else out, data["y"])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        loss.item()  # waits for the step, as a loop that logs its loss does

    def memory():
        return (torch.cuda.max_memory_reserved() >> 20, torch.cuda.max_memory_allocated() >> 20,
                torch.cuda.memory_reserved() >> 20)

    return step, memory


# --- the run: daemon, modes, phases, squeeze --------------------------------

class Run:
    """One measurement: the daemon that logs the GPU, the MPS control
    daemon the first mode needs, the workers; all stopped on the way out,
    a time limit's TERM included."""

    def __init__(self, args):
        self.args = args
        self.out = pathlib.Path(args.out).resolve()
        self.out.mkdir(parents=True, exist_ok=True)
        self.work = pathlib.Path(tempfile.mkdtemp(prefix="carma-collocate."))
        self.daemon = None
        self.mps_control = shutil.which("nvidia-cuda-mps-control")
        self.procs = []
        self.jobs = parse_jobs(args.jobs)
        (self.out / "jobs.json").write_text(json.dumps(self.jobs))

    def log(self, text):
        line = f"{time.strftime('%H:%M:%S')} {text}"
        print(line, flush=True)
        with open(self.out / "run.log", "a") as f:
            f.write(line + "\n")

    def start_daemon(self):
        spool = self.work / "spool"
        config = self.work / "carma.toml"
        config.write_text(
            f'[daemon]\nspool = "{spool}"\nsample_interval_s = 0.5\nmetrics_interval_s = 0.5\n'
            f'[gpu]\nmetrics = "{"auto" if self.args.fake else "gpm"}"\n'
            f'[mps]\nenabled = false\n')
        command = [self.args.carma, "--config", str(config), "daemon"]
        if self.args.fake:
            command += ["--simulate-gpus", "1x40GiB"]
        self.daemon = subprocess.Popen(
            command, stdout=open(self.out / "daemon.log", "w"), stderr=subprocess.STDOUT,
            env={**os.environ, "RUST_LOG": "info"})
        for _ in range(300):
            if (spool / "status.json").exists():
                return spool
            if self.daemon.poll() is not None:
                break
            time.sleep(0.1)
        raise SystemExit("collocate: the daemon did not start; see daemon.log")

    def stop_daemon(self, spool):
        if self.daemon and self.daemon.poll() is None:
            self.daemon.send_signal(signal.SIGTERM)
            try:
                self.daemon.wait(15)
            except subprocess.TimeoutExpired:
                self.daemon.kill()
        for log in sorted(spool.glob("gpu-log*.csv")):
            shutil.copy(log, self.out / log.name)

    def mps_env(self):
        return {"CUDA_MPS_PIPE_DIRECTORY": str(self.work / "mps-pipe"),
                "CUDA_MPS_LOG_DIRECTORY": str(self.work / "mps-log")}

    def start_mps(self):
        for d in ("mps-pipe", "mps-log"):
            (self.work / d).mkdir(exist_ok=True)
        result = subprocess.run([self.mps_control, "-d"], env={**os.environ, **self.mps_env()},
                                timeout=20, check=False)
        if result.returncode != 0:
            raise SystemExit(f"collocate: nvidia-cuda-mps-control -d exited {result.returncode}")

    def stop_mps(self):
        subprocess.run([self.mps_control], input=b"quit\n", env={**os.environ, **self.mps_env()},
                       timeout=20, check=False)
        time.sleep(1)

    def spawn(self, name, out, env, extra):
        job = self.jobs[job_of(name)]
        command = [sys.executable, str(HERE / "collocate.py"), "worker", "--name", name,
                   "--model", job["model"], "--batch", str(job["batch"]),
                   "--stall-ms", str(job["stall_ms"]), "--out", str(out), *extra]
        if self.args.fake:
            command.append("--fake")
        log = open(out / f"{name}.log", "w")
        proc = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env)
        self.procs.append(proc)
        return proc

    def wait_ready(self, out, names, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if all((out / f"{n}.ready").exists() for n in names):
                return True
            time.sleep(0.1)
        return False

    def mode(self, mode, extra_env):
        """Six workers, one schedule; their records go to OUT/MODE/."""
        out = self.out / mode
        out.mkdir(exist_ok=True)
        env = {**os.environ, **extra_env}
        schedule = out / "schedule.json"
        procs = [self.spawn(n, out, env, ["--schedule", str(schedule)]) for n in WORKERS]
        self.log(f"{mode}: {len(procs)} workers started")
        if not self.wait_ready(out, WORKERS, 180):
            self.log(f"{mode}: workers not ready in 180 s")
        start = time.time() + 1.0
        phases = []
        for i, active in enumerate(PHASES):
            begin = start + i * self.args.phase_s
            phases.append({"active": active, "start": begin, "end": begin + self.args.phase_s})
        tmp = out / "schedule.tmp"
        tmp.write_text(json.dumps(phases))
        tmp.rename(schedule)
        self.log(f"{mode}: {len(phases)} phases of {self.args.phase_s} s")
        for proc in procs:
            try:
                proc.wait(timeout=max(1.0, phases[-1]["end"] - time.time() + 60))
            except subprocess.TimeoutExpired:
                proc.kill()
        self.log(f"{mode}: workers ended ({[p.returncode for p in procs]})")

    def squeeze(self, peak_mib):
        """The heavy job under MPS capped at fractions of its NVML peak."""
        out = self.out / "squeeze"
        out.mkdir(exist_ok=True)
        procs = {}
        for f in SQUEEZE:
            name = f"heavy{int(f * 100)}"
            limit = int(peak_mib * f)
            env = {**os.environ, **self.mps_env(), "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": f"0={limit}M"}
            procs[name] = (f, limit, self.spawn(name, out, env, ["--steps", str(SQUEEZE_STEPS)]))
        rows = []
        for name, (f, limit, proc) in procs.items():
            try:
                proc.wait(timeout=120)
            except subprocess.TimeoutExpired:
                proc.kill()
            text = (out / f"{name}.log").read_text(errors="replace")
            rows.append({"worker": name, "fraction": f, "limit_mib": limit,
                         "exit": proc.returncode, "oom": "out of memory" in text.lower()})
        (out / "squeeze.json").write_text(json.dumps({"peak_mib": peak_mib, "runs": rows}))
        self.log(f"squeeze at {peak_mib} MiB: {[(r['fraction'], r['exit']) for r in rows]}")

    def heavy_peak(self, spool):
        """heavy1's largest memory as NVML showed it under MPS (the GPU log)."""
        record = json.loads((self.out / "mps" / "heavy1.json").read_text())
        peaks = [m for row in gpu_rows(spool.glob("gpu-log*.csv"))
                 for pid, m in row["processes"].items() if pid == record["pid"]]
        return max(peaks) if peaks else record["max_reserved_mib"] + 760

    def main(self):
        # A time limit's TERM still stops the workers, MPS and the daemon
        # and keeps the GPU log.
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
        spool = self.start_daemon()
        try:
            self.log(f"daemon up, spool {spool}")
            if not self.args.fake:
                smi = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,clocks.max.sm",
                                      "--format=csv,noheader"], capture_output=True, text=True, check=False)
                self.log(f"GPU: {smi.stdout.strip()}")
            if self.mps_control is None or self.args.fake:
                self.log("no MPS here: the MPS mode and the squeeze are skipped")
            else:
                self.start_mps()
                try:
                    self.mode("mps", self.mps_env())
                    if self.args.squeeze:
                        self.squeeze(self.heavy_peak(spool))
                finally:
                    self.stop_mps()
            self.mode("streams", {})
        finally:
            for proc in self.procs:
                if proc.poll() is None:
                    proc.kill()
            self.stop_daemon(spool)
            shutil.rmtree(self.work, ignore_errors=True)
        return 0


# --- analysis ------------------------------------------------------------

def gpu_rows(files):
    rows = []
    for path in files:
        with open(path) as f:
            for row in csv.DictReader(f):
                procs = {}
                for item in (row.get("processes") or "").split():
                    parts = item.split(":")
                    procs[int(parts[0])] = int(parts[1])
                rows.append({"time": float(row["time"]),
                             "smact": float(row["smact"]) if row["smact"] else None,
                             "power_w": float(row["power_w"]) if row["power_w"] else None,
                             "used_mib": int(row["used_mib"]) if row["used_mib"] else None,
                             "processes": procs})
    rows.sort(key=lambda r: r["time"])
    return rows


def rate(ends, start, end):
    """Steps per second over the steps that ended inside the window."""
    inside = [t for t in ends if start + TRIM_S <= t <= end]
    if len(inside) < 3:
        return None
    return (len(inside) - 1) / (inside[-1] - inside[0])


def window_mean(rows, key, start, end):
    values = [r[key] for r in rows if start + TRIM_S <= r["time"] <= end and r[key] is not None]
    return statistics.mean(values) if values else None


# The simulator's defaults (src/config/default.toml), to set beside the fit.
DEFAULT_K = {"mps": 0.15, "streams": 0.55}


def model_speed(k, own, others):
    """The simulator's speed (src/simulate/model.rs, `Model::speed`)."""
    total = own + sum(others)
    share = 1.0 / total if total > 1.0 else 1.0
    return share / (1.0 + k * (1.0 - min(own, 1.0)) * sum(others))


def model_smact(mode, k, activities):
    """The GPU's SM activity the simulator gives these tasks (`Model::busy`)."""
    busy = 0.0
    for i, own in enumerate(activities):
        others = activities[:i] + activities[i + 1:]
        speed = model_speed(k, own, others)
        if mode == "streams":
            speed *= 1.0 + k * (1.0 - min(own, 1.0)) * sum(others)
        busy += own * speed
    return min(busy, 1.0)


def fit_k(observations, form=None):
    """The k (0..5, step 0.005) with the least squared error in speed."""
    form = form or (lambda k, own, others: model_speed(k, own, others))
    best = None
    for i in range(1001):
        k = i * 0.005
        err = sum((form(k, own, others) - speed) ** 2 for own, others, speed in observations)
        if best is None or err < best[1]:
            best = (k, err)
    return best[0]


class Measured:
    """One mode's speeds. A job's speed alone is the mean of its alone
    phases (a job bound by its launches moves with the CPU: their spread
    is printed), its SM activity alone that of the GPU in them; each
    shared phase gives, per job, its activity, its neighbours' and its
    speed against alone (`observations`)."""

    def __init__(self, directory, mode, rows):
        out = directory / mode
        self.schedule = json.loads((out / "schedule.json").read_text())
        self.records = {w: json.loads((out / f"{w}.json").read_text())
                        for w in WORKERS if (out / f"{w}.json").exists()}
        self.alone_runs = {}
        for phase in self.schedule:
            if len(phase["active"]) == 1:
                w = phase["active"][0]
                self.alone_runs.setdefault(job_of(w), []).append(
                    (self.rate(w, phase), window_mean(rows, "smact", phase["start"], phase["end"])))
        self.alone, self.smact_alone = {}, {}
        for job, runs in self.alone_runs.items():
            rates = [r for r, _ in runs if r is not None]
            smacts = [s for _, s in runs if s is not None]
            if rates:
                self.alone[job] = statistics.mean(rates)
            if smacts:
                self.smact_alone[job] = statistics.mean(smacts)
        self.observations, self.table = [], []
        for phase in self.schedule:
            active = phase["active"]
            speeds = {}
            for w in active:
                r = self.rate(w, phase)
                if r is not None and self.alone.get(job_of(w)):
                    speeds[w] = r / self.alone[job_of(w)]
            activities = [self.smact_alone.get(job_of(w)) for w in active]
            known = all(a is not None for a in activities)
            self.table.append((phase, speeds, activities if known else None))
            if len(active) > 1 and known:
                for i, w in enumerate(active):
                    if w in speeds:
                        self.observations.append(
                            (activities[i], activities[:i] + activities[i + 1:], speeds[w]))

    def rate(self, w, phase):
        return rate(self.records[w]["steps"], phase["start"], phase["end"]) if w in self.records else None


def analyse_mode(directory, mode, rows, jobs, lines):
    """One mode's tables."""
    m = Measured(directory, mode, rows)
    schedule, records, smact_alone = m.schedule, m.records, m.smact_alone
    observations, table = m.observations, m.table
    lines.append(f"\n### {mode}\n")
    lines.append("| job | model, batch, CPU stall per step | steps/s alone, each alone phase | SMACT alone |")
    lines.append("|---|---|---|---|")
    for job, spec in jobs.items():
        each = ", ".join(fmt(r) for r, _ in m.alone_runs.get(job, []))
        lines.append(f"| {job} | {spec['model']}, {spec['batch']}, {spec['stall_ms']:g} ms | {each} "
                     f"| {fmt(smact_alone.get(job))} |")

    k = fit_k(observations) if observations else None
    lines.append(f"\nSpeed against alone, measured (the simulator's with k = {DEFAULT_K[mode]}; "
                 f"with k = {fmt(k)}, the least-squares fit to these {len(observations)} speeds). "
                 "SM activity: the GPU's measured; the sum of each job's activity alone times its "
                 "measured speed (SM work conserved); the simulator's with its k. Power: watts.\n")
    lines.append("| phase | speeds | GPU SMACT | sum of SMACT alone x speed | simulator's SMACT | power |")
    lines.append("|---|---|---|---|---|---|")
    for phase, speeds, activities in table:
        active = phase["active"]
        cells = []
        for i, w in enumerate(active):
            predicted = ""
            if activities and len(active) > 1:
                others = activities[:i] + activities[i + 1:]
                predicted = (f" ({model_speed(DEFAULT_K[mode], activities[i], others):.2f}; "
                             f"{model_speed(k, activities[i], others):.2f})")
            cells.append(f"{w} {fmt(speeds.get(w))}{predicted}")
        conserved = (sum(a * speeds[w] for a, w in zip(activities, active))
                     if activities and all(w in speeds for w in active) else None)
        simulated = model_smact(mode, DEFAULT_K[mode], activities) if activities else None
        lines.append(f"| {'+'.join(active)} | {', '.join(cells)} "
                     f"| {fmt(window_mean(rows, 'smact', phase['start'], phase['end']))} "
                     f"| {fmt(conserved)} | {fmt(simulated)} "
                     f"| {fmt(window_mean(rows, 'power_w', phase['start'], phase['end']))} |")

    lines.append("\nMemory, MiB: the process's peak as NVML showed it; PyTorch's largest "
                 "reserve and allocation; the context (peak less reserve); what the job needs "
                 "(allocation and context).\n")
    lines.append("| worker | NVML peak | torch reserved | torch allocated | context | need | reserved after each warm-up step |")
    lines.append("|---|---|---|---|---|---|---|")
    for w, rec in records.items():
        peak = max((r["processes"].get(rec["pid"], 0) for r in rows), default=0)
        context = peak - rec["max_reserved_mib"]
        warm = " ".join(str(step[3]) for step in rec["warmup"])
        lines.append(f"| {w} | {peak} | {rec['max_reserved_mib']} | {rec['max_allocated_mib']} "
                     f"| {context} | {rec['max_allocated_mib'] + context} | {warm} |")
    loss = [r["used_mib"] - sum(r["processes"].values()) for r in rows
            if schedule[0]["start"] <= r["time"] <= schedule[-1]["end"] and r["used_mib"] is not None]
    if loss:
        lines.append(f"\nThe GPU's used memory less its processes' while the six ran: "
                     f"{min(loss)}-{max(loss)} MiB (median {statistics.median(loss):.0f})")


def analyse(args):
    directory = pathlib.Path(args.dir)
    rows = gpu_rows(sorted(directory.glob("gpu-log*.csv")))
    lines = ["# Collocated jobs, measured", ""]
    idle = [r for r in rows if r["processes"] == {} and r["used_mib"] is not None]
    if idle:
        lines.append(f"Before any worker: {statistics.median(r['used_mib'] for r in idle):.0f} MiB used "
                     f"(the driver's reserve), {statistics.mean(r['power_w'] for r in idle):.1f} W.")
    jobs = json.loads((directory / "jobs.json").read_text())
    for mode in ("mps", "streams"):
        if (directory / mode / "schedule.json").exists():
            analyse_mode(directory, mode, rows, jobs, lines)
    squeeze = directory / "squeeze" / "squeeze.json"
    if squeeze.exists():
        data = json.loads(squeeze.read_text())
        lines.append(f"\n### The heavy job capped under MPS (its NVML peak {data['peak_mib']} MiB)\n")
        lines.append("| cap, share of the peak | cap MiB | exit | CUDA OOM | torch reserved | torch allocated |")
        lines.append("|---|---|---|---|---|---|")
        for r in data["runs"]:
            record = squeeze.parent / f"{r['worker']}.json"
            held = json.loads(record.read_text()) if record.exists() else {}
            lines.append(f"| {r['fraction']:.0%} | {r['limit_mib']} | {r['exit']} | {'yes' if r['oom'] else 'no'} "
                         f"| {held.get('max_reserved_mib', '—')} | {held.get('max_allocated_mib', '—')} |")
    text = "\n".join(lines) + "\n"
    print(text)
    (directory / "analysis.md").write_text(text)
    return 0


def water_filled_speed(b, k, own, others):
    """A form the measurements suggested: the SMs' time shared out in
    proportion to each job's activity to the power `b`, no job given more
    than it asks (water-filling), then the simulator's interference."""
    activities = [own, *others]
    share = [0.0] * len(activities)
    left, open_ = 1.0, set(range(len(activities)))
    while open_:
        weight = sum(activities[j] ** b for j in open_)
        fill = {j: left * activities[j] ** b / weight for j in open_}
        full = [j for j in open_ if fill[j] >= activities[j]]
        if not full:
            for j in open_:
                share[j] = fill[j]
            break
        for j in full:
            share[j] = activities[j]
            left -= activities[j]
            open_.discard(j)
    return share[0] / own / (1.0 + k * (1.0 - min(own, 1.0)) * sum(others))


def rms(form, observations):
    return math.sqrt(statistics.mean((form(own, others) - speed) ** 2
                                     for own, others, speed in observations))


def fit(args):
    """How well SM activity alone predicts speeds: the rms error of the
    simulator's form at its k and at its best k, and of two other forms
    at their best parameters, over every shared phase of the runs given."""
    runs = [pathlib.Path(d) for d in args.dirs]
    for mode in ("mps", "streams"):
        observations = []
        for directory in runs:
            if (directory / mode / "schedule.json").exists():
                rows = gpu_rows(sorted(directory.glob("gpu-log*.csv")))
                observations += Measured(directory, mode, rows).observations
        if not observations:
            continue
        print(f"{mode}: {len(observations)} speeds from {len(runs)} run(s)")
        default = DEFAULT_K[mode]
        print(f"  simulator's form, k = {default} (its default): rms "
              f"{rms(lambda o, n: model_speed(default, o, n), observations):.3f}")
        k = fit_k(observations)
        print(f"  simulator's form, k = {k:.3f} (least squares): rms "
              f"{rms(lambda o, n: model_speed(k, o, n), observations):.3f}")

        def plain(k, own, others):
            total = own + sum(others)
            return (1.0 / total if total > 1.0 else 1.0) / (1.0 + k * sum(others))

        k = fit_k(observations, plain)
        print(f"  without the own-activity factor, k = {k:.3f}: rms "
              f"{rms(lambda o, n: plain(k, o, n), observations):.3f}")
        best = min(((rms(lambda o, n: water_filled_speed(b / 10, k / 50, o, n), observations), b / 10, k / 50)
                    for b in range(0, 61) for k in range(0, 51)))
        print(f"  SMs water-filled by activity^{best[1]:.1f}, k = {best[2]:.2f}: rms {best[0]:.3f}")
    return 0


def fmt(value):
    return "—" if value is None else f"{value:.3f}" if isinstance(value, float) else str(value)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run")
    run.add_argument("--carma", required=True)
    run.add_argument("--out", required=True)
    run.add_argument("--phase-s", type=float, default=8.0)
    run.add_argument("--jobs", default=JOBS)
    run.add_argument("--no-squeeze", dest="squeeze", action="store_false")
    run.add_argument("--fake", action="store_true")
    w = sub.add_parser("worker")
    w.add_argument("--name", required=True)
    w.add_argument("--model", required=True)
    w.add_argument("--batch", type=int, required=True)
    w.add_argument("--stall-ms", type=float, default=0.0)
    w.add_argument("--out", required=True)
    w.add_argument("--schedule")
    w.add_argument("--steps", type=int, default=0)
    w.add_argument("--warmup-steps", type=int, default=5)
    w.add_argument("--fake", action="store_true")
    a = sub.add_parser("analyse")
    a.add_argument("dir")
    f = sub.add_parser("fit")
    f.add_argument("dirs", nargs="+")
    args = parser.parse_args()
    if args.command == "run":
        return Run(args).main()
    if args.command == "worker":
        return worker(args)
    if args.command == "fit":
        return fit(args)
    return analyse(args)


if __name__ == "__main__":
    sys.exit(main())

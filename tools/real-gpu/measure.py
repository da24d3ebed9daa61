#!/usr/bin/env python3
"""Step 4 of run.sh: measured peaks against carma's estimates.

Each model trains --steps steps at two batch sizes. Its peak is measured
twice: by NVML, as carma sees a process (the process's used GPU memory,
sampled every 50 ms), and by PyTorch (`torch.cuda.max_memory_reserved`).
Several models train at once: each process's memory is its own, and the
GPU has room for all of them, so sharing changes their speed, not their
peaks. The summaries a user would paste (module print, torchinfo,
torchsummary; made on the CPU at batch 1) are estimated by
`carma estimate --batch-size B` with no declared memory: the estimators
alone. Writes estimates.csv and estimates.md in --out and prints the
table."""
import argparse
import concurrent.futures
import csv
import json
import pathlib
import subprocess
import sys
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
MODELS = [
    ("resnet18", (64, 256)), ("resnet50", (32, 128)), ("resnet152", (16, 64)),
    ("vgg16", (16, 64)), ("densenet121", (32, 96)), ("mobilenet_v3_large", (64, 256)),
    ("efficientnet_b0", (32, 128)), ("convnext_tiny", (32, 96)), ("regnet_y_8gf", (16, 64)),
    ("inception_v3", (32, 96)), ("vit_b_16", (16, 64)), ("vit_l_16", (8, 24)),
    ("swin_t", (16, 64)), ("bert-base", (8, 32)), ("distilbert", (16, 64)),
    ("roberta-base", (8, 32)), ("gpt2", (4, 16)), ("gpt2-medium", (2, 8)),
]
FORMATS = ("print", "torchinfo", "torchsummary")


class Peaks:
    """Each process's largest used GPU memory, as NVML reports it."""

    def __init__(self):
        self.peak = {}
        self.source = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.thread.start()

    def run(self):
        try:
            import pynvml

            pynvml.nvmlInit()
            handles = [pynvml.nvmlDeviceGetHandleByIndex(i)
                       for i in range(pynvml.nvmlDeviceGetCount())]
            self.source = "pynvml"

            def sample():
                for h in handles:
                    for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h):
                        if p.usedGpuMemory is not None:
                            yield p.pid, p.usedGpuMemory // 2**20
        except Exception:  # noqa: BLE001 - fall back to nvidia-smi
            self.source = "nvidia-smi"

            def sample():
                out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                                      "--format=csv,noheader,nounits"],
                                     capture_output=True, text=True).stdout
                for line in out.splitlines():
                    pid, _, mib = line.partition(",")
                    if mib.strip().isdigit():
                        yield int(pid), int(mib)
        while not self.stop.is_set():
            for pid, mib in sample():
                self.peak[pid] = max(self.peak.get(pid, 0), mib)
            time.sleep(0.05)


def summaries(out, jobs):
    """Every model's summaries, made on the CPU, several at once."""
    def one(model):
        r = subprocess.run([sys.executable, str(HERE / "train.py"), model, "1", "0",
                            "--summaries", str(out)], capture_output=True, text=True)
        for line in r.stderr.splitlines()[-3:]:
            print(f"  {model} summaries: {line}", flush=True)

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        list(pool.map(one, [m for m, _ in MODELS]))


def train(peaks, model, batch, steps):
    """Trains one (model, batch); its NVML and PyTorch peaks, or why not."""
    proc = subprocess.Popen([sys.executable, str(HERE / "train.py"), model, str(batch),
                             str(steps)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stdout, stderr = proc.communicate()
    time.sleep(0.2)  # the sampler's last look
    if proc.returncode != 0:
        return {"error": (stderr.strip().splitlines() or ["?"])[-1][:160]}
    last = json.loads(stdout.strip().splitlines()[-1])
    return {"nvml_peak_mib": peaks.peak.get(proc.pid, 0),
            "torch_reserved_mib": last["max_reserved_mib"],
            "seconds": round(last["ended"] - last["started"], 1)}


def measure(out, steps, jobs):
    """Every (model, batch) of MODELS trained and measured on the GPU."""
    t0 = time.time()
    summaries(out / "summaries", 8)
    print(f"summaries written in {time.time() - t0:.0f} s", flush=True)
    peaks = Peaks()
    runs = [(m, b) for m, batches in MODELS for b in batches]
    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        measured = dict(zip(runs, pool.map(lambda r: train(peaks, r[0], r[1], steps), runs)))
    peaks.stop.set()
    print(f"trained in {time.time() - t0:.0f} s, NVML read by {peaks.source}", flush=True)
    return measured


def estimate(carma, summary, batch):
    r = subprocess.run([carma, "estimate", "--json", "--batch-size", str(batch), str(summary)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        return None, "error: " + " ".join(r.stderr.split())[:160]
    e = json.loads(r.stdout)
    return e.get("mib"), e.get("source")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--carma", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=6, help="models trained at once")
    parser.add_argument("--measured", help="peaks of an earlier run (its estimates.csv, or "
                        "data/measured-h200/peaks.csv), whose summaries in --out/summaries "
                        "are estimated again, with no GPU")
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    if args.measured:
        with open(args.measured, newline="") as f:
            measured = {(r["model"], int(r["batch"])): {
                k: (int(float(r[k])) if r.get(k) and k.endswith("_mib") else r.get(k) or None)
                for k in ("nvml_peak_mib", "torch_reserved_mib", "seconds", "error")}
                for r in csv.DictReader(f)}
    else:
        measured = measure(out, args.steps, args.jobs)
    rows = []
    for (model, batch), m in measured.items():
        row = {"model": model, "batch": batch, **{k: m.get(k) for k in
               ("nvml_peak_mib", "torch_reserved_mib", "seconds", "error")}}
        for fmt in FORMATS:
            summary = out / "summaries" / f"{model}.{fmt}.txt"
            mib, source = estimate(args.carma, summary, batch) if summary.exists() \
                else (None, "no summary")
            peak = m.get("nvml_peak_mib")
            row[f"{fmt}_mib"] = mib
            row[f"{fmt}_source"] = source
            row[f"{fmt}_error_pct"] = round((mib - peak) / peak * 100, 1) \
                if mib and peak else None
        rows.append(row)
        print(json.dumps(row), flush=True)
    with open(out / "estimates.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "estimates.md", "w") as f:
        f.write("| model | batch | peak, NVML | torch reserved | "
                + " | ".join(f"estimate from {fmt} (estimator, error)" for fmt in FORMATS)
                + " |\n|---|---|---|---|" + "---|" * len(FORMATS) + "\n")
        for r in rows:
            if r["error"]:
                f.write(f"| {r['model']} | {r['batch']} | did not run: {r['error']} |"
                        + " |" * (2 + len(FORMATS)) + "\n")
                continue
            cells = []
            for fmt in FORMATS:
                mib, source, err = r[f"{fmt}_mib"], r[f"{fmt}_source"], r[f"{fmt}_error_pct"]
                cells.append("n/a" if mib is None else
                             f"{mib} MiB ({source}, {'n/a' if err is None else f'{err:+.0f}%'})")
            f.write(f"| {r['model']} | {r['batch']} | {r['nvml_peak_mib']} MiB | "
                    f"{r['torch_reserved_mib']} MiB | " + " | ".join(cells) + " |\n")
    print((out / "estimates.md").read_text())


if __name__ == "__main__":
    main()

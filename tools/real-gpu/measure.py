#!/usr/bin/env python3
"""Step 4 of run.sh: measured peaks against carma's estimates.

Each model trains a few dozen steps at two or more batch sizes, alone on
the GPU. Its peak is measured twice: by NVML, as carma sees a process
(nvidia-smi's per-process memory, sampled every 100 ms), and by PyTorch
(`torch.cuda.max_memory_reserved`). The model's module print, written by
the job as a user would paste it, is estimated by `carma estimate` (no
declared memory: the estimators alone). Writes estimates.csv and
estimates.md in --out, and prints the table."""
import argparse
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


def nvml_peak(pid_holder, stop, peak):
    while not stop.is_set():
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True)
        for line in out.stdout.splitlines():
            pid, _, mib = line.partition(",")
            if pid.strip() == str(pid_holder[0]):
                peak[0] = max(peak[0], int(mib))
        time.sleep(0.1)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--carma", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for model, batches in MODELS:
        for batch in batches:
            summary = out / f"{model}.txt"
            proc = subprocess.Popen([sys.executable, str(HERE / "train.py"), model, str(batch),
                                     str(args.steps), "--summary", str(summary)],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            peak, stop = [0], threading.Event()
            sampler = threading.Thread(target=nvml_peak, args=([proc.pid], stop, peak))
            sampler.start()
            stdout, stderr = proc.communicate()
            stop.set()
            sampler.join()
            if proc.returncode != 0:
                why = (stderr.strip().splitlines() or ["?"])[-1][:120]
                print(f"{model} batch {batch}: did not run: {why}", flush=True)
                continue
            torch_peak = json.loads(stdout.strip().splitlines()[-1])["max_reserved_mib"]
            est = subprocess.run([args.carma, "estimate", "--json", "--batch-size", str(batch),
                                  str(summary)], capture_output=True, text=True)
            if est.returncode != 0:
                print(f"{model} batch {batch}: carma estimate failed: {est.stderr.strip()}")
                continue
            e = json.loads(est.stdout)
            mib = e.get("mib")
            error = (mib - peak[0]) / peak[0] * 100 if mib and peak[0] else None
            rows.append({"model": model, "batch": batch, "nvml_peak_mib": peak[0],
                         "torch_reserved_mib": torch_peak, "estimate_mib": mib,
                         "estimator": e.get("source"),
                         "error_pct": None if error is None else round(error, 1)})
            print(json.dumps(rows[-1]), flush=True)
    with open(out / "estimates.csv", "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]) if rows else ["model"])
        writer.writeheader()
        writer.writerows(rows)
    with open(out / "estimates.md", "w") as f:
        f.write("| model | batch | measured peak (NVML) | torch reserved | carma's estimate "
                "| estimator | error |\n|---|---|---|---|---|---|---|\n")
        for r in rows:
            err = "n/a" if r["error_pct"] is None else f"{r['error_pct']:+.0f}%"
            f.write(f"| {r['model']} | {r['batch']} | {r['nvml_peak_mib']} MiB | "
                    f"{r['torch_reserved_mib']} MiB | {r['estimate_mib']} MiB | "
                    f"{r['estimator']} | {err} |\n")
    print((out / "estimates.md").read_text())


if __name__ == "__main__":
    main()

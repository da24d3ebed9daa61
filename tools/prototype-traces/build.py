#!/usr/bin/env python3
"""Rebuilds a trace CSV from one of the research prototype's submission
scripts (data/carma/prototype-scripts/*.sh: `python src/submit.py --task
workloads/X.rad` lines and `sleep N` between them), in the columns of the
artifact's traces in data/carma/traces/.

Each submitted job takes its row (class, batch, GPUs, duration, measured
memory, published estimates) from those two traces, which hold 50 of the
prototype's job files. A job file they do not hold is derived, and said
on stderr:

- `NAME_50e_K.rad` from `NAME_20e_K.rad` (or the reverse): the same job
  trained for 50 epochs instead of 20, its duration scaled by 50/20;
- a model at a batch size the traces lack (`mobilenet.rad` at 32, where
  they hold only `mobilenet3.rad` at 128): memory and published estimates
  from its job file in data/carma/prototype-scripts/workloads/, class from
  the model's known row, duration from that row scaled by the median
  ratio of durations at the two batch sizes over the traces' other models
  that ran at both.

    tools/prototype-traces/build.py SCRIPT > OUT.csv
"""
import csv
import pathlib
import re
import statistics
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
TRACES = REPO / "data/carma/traces"
WORKLOADS = REPO / "data/carma/prototype-scripts/workloads"


def known_rows():
    rows = {}
    for trace in sorted(TRACES.glob("*.csv")):
        with open(trace, newline="") as f:
            for row in csv.DictReader(f):
                rows.setdefault(row["task"], row)
    return rows


def legacy_rad(path):
    """The published values of a prototype job file: batch, GPUs, measured
    memory and the Horus, FakeTensor and GPUMemNet estimates (its last
    seven lines, after the dataset)."""
    lines = [l.strip() for l in path.read_text().splitlines() if l.strip()]
    batch, _, gpus, memory, horus, faketensor, gpumemnet = lines[-7:]
    return {"batch": batch, "gpus": gpus, "memory_mib": f"{float(memory):.1f}",
            "est_horus_mib": horus, "est_faketensor_mib": faketensor,
            "est_gpumemnet_mib": gpumemnet}


def derive(task, rows):
    epochs = re.match(r"(.*)_(20|50)e_(\d+)\.rad$", task)
    if epochs:
        stem, n, k = epochs.groups()
        other = "50" if n == "20" else "20"
        base = rows.get(f"{stem}_{other}e_{k}.rad")
        if base:
            row = dict(base, task=task,
                       duration_s=str(round(float(base["duration_s"]) * int(n) / int(other))))
            return row, f"{task}: {base['task']} scaled by {n}/{other} epochs"
    rad = WORKLOADS / task
    if not rad.exists():
        sys.exit(f"{task}: in neither trace nor {WORKLOADS}; cannot derive it")
    published = legacy_rad(rad)
    model = next((r for r in rows.values() if pathlib.Path(r["task"]).stem.rstrip("0123456789")
                  == pathlib.Path(task).stem.rstrip("0123456789")), None)
    if model is None:
        sys.exit(f"{task}: no other batch size of its model in the traces")
    by_model = {}
    for r in rows.values():
        by_model.setdefault(r["model"], {})[r["batch"]] = float(r["duration_s"])
    want, have = published["batch"], model["batch"]
    ratios = [d[want] / d[have] for d in by_model.values() if want in d and have in d]
    if not ratios:
        sys.exit(f"{task}: no model in the traces ran at both batch {want} and {have}")
    ratio = statistics.median(ratios)
    row = dict(model, task=task, **published,
               duration_s=str(round(float(model["duration_s"]) * ratio)))
    return row, (f"{task}: {model['task']}'s duration x {ratio:.3f} (median of {len(ratios)} "
                 f"models' batch {want} / batch {have}); memory and estimates from its job file")


def main():
    script = pathlib.Path(sys.argv[1])
    rows = known_rows()
    out, at = [], 0
    for line in script.read_text().splitlines():
        words = line.split()
        if words[:1] == ["sleep"]:
            at += int(words[1])
        elif "--task" in words:
            task = words[words.index("--task") + 1].split("/")[-1]
            if task not in rows:
                rows[task], how = derive(task, rows)
                print(f"derived {how}", file=sys.stderr)
            out.append(dict(rows[task], submit_s=str(at)))
    writer = csv.DictWriter(sys.stdout, fieldnames=list(next(iter(rows.values())).keys()),
                            lineterminator="\n")
    writer.writeheader()
    writer.writerows(out)


if __name__ == "__main__":
    main()

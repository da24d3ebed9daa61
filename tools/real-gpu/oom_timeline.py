#!/usr/bin/env python3
"""Step 3 of run.sh: how task NAME's OOM crash was recovered: each run's
GPUs, memory limit, end and the time from the crash to the re-run."""
import json
import pathlib
import sys

spool, name = pathlib.Path(sys.argv[1]), sys.argv[2]
task = next(d for s in ("done", "failed", "running", "recovery") if (d := spool / s / name).is_dir())
runs = sorted(task.glob("run-*"), key=lambda p: int(p.name.split("-")[1]))
previous_end = None
for run in runs:
    launch = json.loads((run / "launch.json").read_text())
    end = json.loads((run / "exit.json").read_text()) if (run / "exit.json").exists() else {}
    oom = "out of memory" in (run / "stderr").read_text(errors="replace").lower() \
        if (run / "stderr").exists() else False
    gap = f", {launch['launched_at'] - previous_end:.1f} s after the crash" if previous_end else ""
    print(f"{name} {run.name}: GPUs {launch['gpus']}, limit {launch.get('limit_mib')} MiB, "
          f"exit {end.get('code')}, OOM in stderr: {oom}{gap}")
    previous_end = end.get("ended_at")
print(f"{name}: ended in {task.parent.name}/ after {len(runs)} run(s)")

#!/usr/bin/env python3
"""Step 1 of run.sh: carma's GPU readings (`carma status --json`) against
nvidia-smi's, taken at the same moment. Prints one row per GPU and field,
and exits non-zero when a reading disagrees beyond its tolerance."""
import csv
import json
import sys

status = json.load(open(sys.argv[1]))
rows = list(csv.reader(open(sys.argv[2]), skipinitialspace=True))
bad = 0


def check(gpu, field, carma, smi, ok):
    global bad
    verdict = "ok" if ok else "DIFFERS"
    bad += not ok
    print(f"GPU {gpu} {field:<10} carma {carma!s:<28} nvidia-smi {smi!s:<28} {verdict}")


for gpu, row in zip(status["gpus"], rows):
    index, name, total, used, mode, mig, power, reserved = (row + [""] * 8)[:8]
    # carma's used memory is total minus free: it holds what the driver
    # reserves, which nvidia-smi lists apart (616 MiB on an idle H200).
    reserved = int(reserved) if reserved.strip().isdigit() else 0
    used = str(int(used) + reserved)
    check(gpu["index"], "name", gpu["name"], name, gpu["name"] == name)
    check(gpu["index"], "total MiB", gpu["total_mib"], total,
          abs(gpu["total_mib"] - int(total)) <= max(64, int(total) // 100))
    # Memory moves between the two reads; a few hundred MiB is the same.
    check(gpu["index"], "used MiB", gpu["used_mib"], f"{used} (used + reserved)",
          abs(gpu["used_mib"] - int(used)) <= 256)
    check(gpu["index"], "MIG", gpu["mig"], mig, gpu["mig"] == (mig.strip() == "Enabled"))
    if gpu.get("power_w") is not None and power not in ("", "[N/A]"):
        check(gpu["index"], "power W", gpu["power_w"], power,
              abs(gpu["power_w"] - float(power)) <= max(15.0, float(power) * 0.2))
    print(f"GPU {gpu['index']} SM metrics from {gpu.get('source')}, smact {gpu['smact']:.2f}, "
          f"compute mode (nvidia-smi) {mode}")
if len(status["gpus"]) != len(rows):
    print(f"carma sees {len(status['gpus'])} GPU(s), nvidia-smi {len(rows)}")
    bad += 1
sys.exit(1 if bad else 0)

"""Compares carma's memory estimates with the measured peaks of the
traces' tasks, for job files in the given directories (e.g. those
`rebuild.py` writes, and data/carma/workloads).

    python3 tools/trace-models/compare.py --carma target/release/carma \
        --traces data/carma/traces /tmp/trace-models data/carma/workloads

Declared memory lines are ignored (`[legacy] memory_line = "none"`);
history is off (an empty spool). A need of a whole GPU counts as 40,000.
"""
import argparse, csv, glob, json, os, subprocess, tempfile

p = argparse.ArgumentParser()
p.add_argument('--carma', required=True)
p.add_argument('--traces', required=True)
p.add_argument('dirs', nargs='+')
args = p.parse_args()
tmp = tempfile.mkdtemp()
config = os.path.join(tmp, 'carma.toml')
open(config, 'w').write('[legacy]\nmemory_line = "none"\n')
jobs = {}
for f in glob.glob(f'{args.traces}/*.csv'):
    for r in csv.DictReader(open(f)):
        jobs[r['task'][:-4]] = r
rows = {}
for d in args.dirs:
    for rad in sorted(glob.glob(f'{d}/*.rad')):
        name = os.path.basename(rad)[:-4]
        if name not in jobs:
            continue
        res = {}
        for est in ['ensemble', 'analytic', None]:
            cmd = [args.carma, 'estimate', '--config', config, '--spool', os.path.join(tmp, 'spool'), '--json', rad]
            if est:
                cmd[2:2] = ['--estimators', est]
            out = subprocess.run(cmd, capture_output=True, text=True)
            try:
                j = json.loads(out.stdout)
                res[est or 'chain'] = (j.get('mib') or 40000, j.get('source'))
            except ValueError:
                res[est or 'chain'] = (None, out.stderr.strip()[:40])
        rows[name] = (float(jobs[name]['memory_mib']), res)
errors = {k: [] for k in ['ensemble', 'analytic', 'chain']}
print(f'{"job":28} {"peak":>7} {"ensemble":>14} {"analytic":>14} {"chain":>14} source')
for name, (peak, res) in sorted(rows.items(), key=lambda r: r[1][0]):
    line = f'{name[:28]:28} {peak:7.0f}'
    for k in errors:
        mib, _ = res[k]
        if mib is None:
            line += f' {"-":>14}'
            continue
        d = mib - peak
        errors[k].append(d)
        line += f' {mib:7.0f} {d:+6.0f}' + ('!' if d < -2048 else ' ')
    print(line + ' ' + str(res['chain'][1]))
for k, v in errors.items():
    if v:
        print(f'{k}: {len(v)} jobs, mean overestimate {sum(max(0, x) for x in v) / len(v):.0f} MiB, '
              f'{sum(x < -2048 for x in v)} more than 2 GiB under')

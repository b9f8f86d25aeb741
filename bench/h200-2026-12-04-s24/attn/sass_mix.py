"""Session 24 (attn; from session 23's):
the opcode mix of an `ncu --page source --print-source sass --csv`
export: warp instructions executed per opcode (the whole kernel) with the stall samples,
the hot body (instructions executed at least half the top count: a walk's step), and the
top stall sites.

python3 sass_mix.py EXPORT.csv"""
import collections
import csv
import re
import sys
rows = list(csv.reader(open(sys.argv[1])))
hdr = rows[1]
ix = {h: i for i, h in enumerate(hdr)}
data = [r for r in rows[2:] if len(r) == len(hdr)]
ex = ix["Instructions Executed"]; src = ix["Source"]; samp = ix["Warp Stall Sampling (All Samples)"]
def op(s):
    s = re.sub(r"^@!?U?P\w+\s+", "", s.strip())
    return s.split()[0] if s else "?"
tot = collections.Counter(); st = collections.Counter(); counts = collections.Counter()
for r in data:
    n = int(r[ex].replace(",", "") or 0); o = op(r[src])
    tot[o.split(".")[0]] += n; st[o.split(".")[0]] += int(r[samp].replace(",", "") or 0)
    counts[n] += 1
allx = sum(tot.values()); alls = sum(st.values())
print(f"instructions executed (warp-level) {allx:,}; stall samples {alls:,}")
for o, n in tot.most_common(25):
    print(f"  {o:10s} {n:>12,} {100*n/allx:5.1f}%   samples {100*st[o]/max(alls,1):5.1f}%")
# the loop: the instructions executed most often (the per-step body)
top = max(int(r[ex].replace(',', '') or 0) for r in data)
loop = [r for r in data if int(r[ex].replace(',', '') or 0) >= 0.5 * top]
lm = collections.Counter(op(r[src]).split(".")[0] for r in loop)
print(f"hot body: {len(loop)} instructions executed >= half the top count ({top:,})")
print("  " + ", ".join(f"{o} {n}" for o, n in lm.most_common(30)))
hot = sorted(data, key=lambda r: -int(r[samp].replace(',', '') or 0))[:15]
print("top stall sites:")
for r in hot:
    print(f"  {r[ix['Address']]} {r[src][:60]:60s} samples {r[samp]} exec {r[ex]}")

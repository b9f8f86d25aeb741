"""Opcode mix and top stall sites per kernel from `ncu --page source --csv --print-source sass`."""
import collections, csv, gzip, io, re, sys
text = gzip.open(sys.argv[1], "rt").read() if sys.argv[1].endswith(".gz") else open(sys.argv[1]).read()
sections = re.split(r'^"Kernel Name",', text, flags=re.M)[1:]
for sec in sections:
    name_line, rest = sec.split("\n", 1)
    name = re.search(r"(\w+_kernel)\[", name_line).group(1)
    rows = list(csv.DictReader(io.StringIO(rest)))
    ex = collections.Counter(); stall = []
    total = samples = 0
    for r in rows:
        src = r["Source"].strip()
        n = int(r["Instructions Executed"].replace(",", "") or 0)
        s = int((r.get("Warp Stall Sampling (All Samples)") or "0").replace(",", "") or 0)
        op = re.sub(r"^@!?U?P\w+\s+", "", src).split(" ")[0].split(".")[0]
        ex[op] += n; total += n; samples += s
        stall.append((s, src))
    print(f"**{name}**: {total:,} warp instructions executed")
    print("  mix " + ", ".join(f"{k} {100*v/total:.1f}%" for k, v in ex.most_common(16)))
    stall.sort(reverse=True)
    print("  top stall sites " + "; ".join(f"`{s}` {100*n/samples:.1f}%" for n, s in stall[:6]))

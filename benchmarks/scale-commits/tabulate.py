"""Tabulate bench scale results of two commits measured back to back (old: bb08a65, new: main)."""
import json, statistics, sys
rows = []
for compute, pre in ((2, 'sat'), (20, 'scale')):
    for i in range(1, 11):
        for kind in ('old', 'new'):
            try:
                d = json.load(open(f'{pre}-{kind}{i}/results.json'))
            except FileNotFoundError:
                continue
            for r in d['rows']:
                sm = r.get('shared_memory', 'auto')
                path = 'bb08a65 (TCP)' if kind == 'old' else ('main, shared memory' if sm == 'auto' else 'main, TCP')
                per_req = r['shard_cpu_cores'] * 1e3 / r['updates_per_s']
                rows.append((compute, i, path, r['updates_per_s'], r['pull_latency_ms_median'], per_req, r['load_avg_1m']))
lines = ["| compute ms | pair | code and path | updates/s | pull median ms | shard CPU ms per request | load avg |",
         "|---|---|---|---|---|---|---|"]
lines += [f"| {c} | {i} | {p} | {u:.0f} | {l:.2f} | {q:.3f} | {la} |" for c, i, p, u, l, q, la in rows]
summ = []
for c in (2, 20):
    pick = lambda name: [u for cc, _, p, u, *_ in rows if cc == c and p == name]
    old, new, tcp = pick('bb08a65 (TCP)'), pick('main, shared memory'), pick('main, TCP')
    if old and new:
        summ.append(f"- {c} ms compute: median {statistics.median(new):.0f} updates/s on main (shared memory) against "
                    f"{statistics.median(old):.0f} on bb08a65: **{statistics.median(new) / statistics.median(old):.2f}×**"
                    + (f"; main over TCP {statistics.median(tcp):.0f}" if tcp else "") + f" ({len(old)} pairs).")
for c in (2, 20):
    ratios = []
    for i in range(1, 11):
        old = [u for cc, ii, p, u, *_ in rows if cc == c and ii == i and p == 'bb08a65 (TCP)']
        new = [u for cc, ii, p, u, *_ in rows if cc == c and ii == i and p == 'main, shared memory']
        if old and new:
            ratios.append(new[0] / old[0])
    if ratios:
        summ.append(f"- {c} ms compute, per pair (main shared memory / bb08a65): "
                    + ", ".join(f"{r:.2f}" for r in ratios) + f"; median {statistics.median(ratios):.2f}×, "
                    f"{sum(r >= 1.5 for r in ratios)} of {len(ratios)} pairs at 1.5× or more.")
print("\n".join(summ) + "\n\n" + "\n".join(lines))

#!/usr/bin/env python3
"""trace_cost.py - score speculative runs' decisions with one verify-cost table.

On a shared machine the tok/s of two runs differ by 20-40% from timing noise alone, which hides
what a draft-length policy decided. This reads `--spec-trace` files (one JSON line per draft and
accept, src/spec/stats.h) and prices every round with the same table: a round that verified k
drafts costs c_v(k + 1) + k c_d, in units of one plain decode step, so the modelled speedup is
committed tokens / total cost (a plain step commits one token at cost 1).

Usage: bench/trace_cost.py --costs 1:1,2:1.07,3:1.10,4:1.37,5:1.54 [--draft-cost 0.045] TRACE...
The costs are `nextn bench --verify-sweep`'s relative column (x c_v(1)); row counts beyond the
table extend its last step. Prints per trace: rounds, tokens, cost, modelled speedup, the k of
every round. One sequence per trace (seq 0) is assumed.
"""
import argparse
import json
import sys


def parse_costs(text):
    cv = {}
    for item in text.split(","):
        n, v = item.split(":")
        cv[int(n)] = float(v)
    if 1 not in cv:
        sys.exit("trace_cost: the table needs the 1-row cost")
    return cv


def verify_cost(cv, rows):
    if rows in cv:
        return cv[rows]
    top = max(cv)
    step = cv[top] - cv.get(top - 1, cv[top])
    return cv[top] + step * (rows - top)


def score(path, cv, c_d):
    ks, committed = [], 0
    with open(path) as f:
        for line in f:
            e = json.loads(line)
            if e.get("evt") == "draft":
                ks.append(len(e.get("drafts", [])))
            elif e.get("evt") == "accept":
                committed += e["n"] + 1
    cost = sum(verify_cost(cv, k + 1) + k * c_d for k in ks)
    return ks, committed, cost


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--costs", required=True, help="rows:relative cost, comma-separated")
    ap.add_argument("--draft-cost", type=float, default=0.045, help="one draft step, x c_v(1)")
    ap.add_argument("traces", nargs="+")
    a = ap.parse_args()
    cv = parse_costs(a.costs)
    for path in a.traces:
        ks, tokens, cost = score(path, cv, a.draft_cost)
        speedup = tokens / cost if cost > 0 else 0.0
        print(f"{path}: {len(ks)} rounds, {tokens} tokens, cost {cost:.1f}, modelled {speedup:.2f}x | k: "
              + " ".join(map(str, ks)))


if __name__ == "__main__":
    main()

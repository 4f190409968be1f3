#!/usr/bin/env python3
"""Where a decode step's time goes, from the per-block stamps of QS_BLOCK_STAMPS=FILE
(kernels/cuda/common/block_stamps.h).

Each launch of the decode attention or the skinny GEMV left one record per block: the global
timer at its entry, after the wait for the previous kernel, and at its inner phases. A replayed
graph overwrites its launches' records, so the file holds the last replay of every recorded step.
This script groups the records into launches, orders them in time, cuts them into runs of
back-to-back launches (a gap of more than --gap µs starts a new run), and prints, for the run with
the most GEMV launches (the quantized model's decode step) the median over the step's layers of
each kernel's times, in µs:

  own       end of this launch − end of the launch before it (its share of the step)
  entry     first block's entry − end of the previous launch (negative: started early, PDL)
  spread    last block's entry − first block's entry
  waited    first block past its wait − end of the previous launch
  then the kernel's phases (medians over blocks): GEMV  issue (entry → stream issued),
  stage (wait → activations staged), loop (→ warp 0 past its main loop), tail (→ exit, the
  reducing blocks' tail separately); attention  qStaged (wait → queries staged), lastKeyTile
  (wait → the tile with the new key done, in the block that owns it), tiles (wait → tiles done),
  part, sync1, merge.

Usage: block_stamps.py FILE [--gap 200] [--all] [--json]
"""
import argparse
import csv
import json
import statistics
from collections import defaultdict

GEMV, ATTN = 2, 1


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else float("nan")


def load(path):
    launches = defaultdict(list)
    for row in csv.DictReader(open(path)):
        r = {k: int(v) for k, v in row.items()}
        launches[(r["site"], r["base"])].append(r)
    out = []
    for (site, base), blocks in launches.items():
        detail = blocks[0]["detail"] & ~(1 << 63)
        t = lambda i: [b[f"t{i}"] if b[f"t{i}"] else None for b in blocks]
        L = {"site": site, "base": base, "blocks": blocks, "n": detail >> 32, "k": detail & 0xFFFFFFFF,
             "first": min(t(0)), "lastEntry": max(t(0)), "end": max(x for x in t(5) if x is not None)}
        L["waited"] = min(x for x in (t(2) if site == GEMV else t(1)) if x is not None)
        out.append(L)
    out.sort(key=lambda L: L["first"])
    return out


def runs(launches, gap_ns):
    cur, res = [], []
    for L in launches:
        if cur and L["first"] - max(c["end"] for c in cur) > gap_ns:
            res.append(cur)
            cur = []
        cur.append(L)
    if cur:
        res.append(cur)
    return res


def kind(L):
    return "attention" if L["site"] == ATTN else f"gemv {L['n']}x{L['k']}"


def phases(L):
    b = L["blocks"]
    us = lambda xs: med(xs) / 1000.0
    if L["site"] == GEMV:
        red = [x for x in b if x["detail"] >> 63]
        plain = [x for x in b if not x["detail"] >> 63]
        return {
            "issue": us([x["t1"] - x["t0"] for x in b]),
            "stage": us([x["t3"] - x["t2"] for x in b]),
            "loop": us([x["t4"] - x["t3"] for x in b if x["t4"]]),
            "tail": us([x["t5"] - x["t4"] for x in plain if x["t4"] and x["t5"]]),
            "reduce": us([x["t5"] - x["t4"] for x in red if x["t4"] and x["t5"]]),
            "lastLoop": (max(x["t4"] for x in b if x["t4"]) - L["waited"]) / 1000.0,
        }
    last = [x["detail"] >> 32 for x in b if x["detail"] >> 32]
    return {
        "qStaged": us([x["detail"] & 0xFFFFFFFF for x in b]),
        "lastKeyTile": max(last) / 1000.0 if last else float("nan"),
        "tiles": us([x["t2"] - x["t1"] for x in b]),
        "part": us([x["t3"] - x["t2"] for x in b]),
        "sync1": us([x["t4"] - x["t3"] for x in b]),
        "merge": us([x["t5"] - x["t4"] for x in b]),
        "lastTiles": (max(x["t2"] for x in b) - L["waited"]) / 1000.0,
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--gap", type=float, default=200.0, help="µs between runs")
    ap.add_argument("--all", action="store_true", help="print every launch of the chosen run")
    ap.add_argument("--json", action="store_true", help="the medians per kernel as JSON")
    a = ap.parse_args()
    launches = load(a.file)
    rs = runs(launches, a.gap * 1000)
    say = (lambda *x: None) if a.json else print
    say(f"{len(launches)} launches in {len(rs)} runs: " +
          ", ".join(f"{len(r)} ({sum(L['site'] == GEMV for L in r)} gemv)" for r in rs))
    run = max(rs, key=lambda r: (sum(L["site"] == GEMV for L in r), r[-1]["end"]))
    say(f"chosen run: {len(run)} launches, {(run[-1]['end'] - run[0]['first']) / 1000:.1f} µs from the first entry to the last exit")
    rows = defaultdict(list)
    prev = None
    for L in run:
        if prev is not None:
            rec = {"own": (L["end"] - prev["end"]) / 1000, "entry": (L["first"] - prev["end"]) / 1000,
                   "spread": (L["lastEntry"] - L["first"]) / 1000, "waited": (L["waited"] - prev["end"]) / 1000,
                   "blocks": len(L["blocks"])}
            rec.update(phases(L))
            rows[kind(L)].append(rec)
            if a.all:
                print(kind(L), " ".join(f"{k}={v:.2f}" if isinstance(v, float) else f"{k}={v}" for k, v in rec.items()))
        prev = L
    if a.json:
        print(json.dumps({k: {"launches": len(recs), "sum_own_us": sum(r["own"] for r in recs),
                              **{key: med([r[key] for r in recs]) for key in recs[0]}}
                          for k, recs in rows.items()}, indent=1))
        return
    total = 0.0
    for k, recs in sorted(rows.items(), key=lambda kv: -sum(r["own"] for r in kv[1])):
        keys = list(recs[0].keys())
        s = sum(r["own"] for r in recs)
        total += s
        print(f"{k:>18}  x{len(recs):<3} sum own {s:8.1f} µs | " +
              "  ".join(f"{key} {med([r[key] for r in recs]):.2f}" for key in keys))
    print(f"sum of own times: {total:.1f} µs (launches between instrumented ones fall into the next one's own)")


if __name__ == "__main__":
    main()

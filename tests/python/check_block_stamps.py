#!/usr/bin/env python3
"""scripts/gpu/block_stamps.py on records whose phases are known: two decode steps' worth of
launches (a GEMV with a split-K reducer, the attention, a GEMV without splits), the first step an
earlier recording that must not be chosen, records of a second run far later. Checks the medians
it reports against the values the records were built from.

Usage: check_block_stamps.py SCRIPT"""
import json
import os
import subprocess
import sys
import tempfile

GEMV, ATTN = 2, 1


def main():
    script = sys.argv[1]
    rows = ["site,sm,base,slot,detail,t0,t1,t2,t3,t4,t5"]
    base = 0

    def launch(site, n, k, start, blocks, phases, reducer_tail=0):
        nonlocal base
        for b in range(blocks):
            detail = (n << 32) | k
            if site == ATTN:  # queries staged 400 + 100·b ns after the wait; block 2 owns the new key (2.5 µs)
                detail = (400 + 100 * b) | ((2500 << 32) if b == 2 else 0)
            red = site == GEMV and reducer_tail and b == blocks - 1
            if red:
                detail |= 1 << 63
            t = [start + b * 10]  # entries 10 ns apart
            for p in phases:
                t.append(t[-1] + p)
            if red:
                t[5] += reducer_tail
            rows.append(",".join(str(v) for v in [site, b % 132, base, base + b, detail] + t))
        base += blocks
        return max(int(r.split(",")[10]) for r in rows[-blocks:])

    # A recorded step: GEMV 6144x4096 (4 blocks, the last reduces), attention, GEMV 4096x4096.
    def step(t):
        end = launch(GEMV, 6144, 4096, t, 4, [1000, 500, 2000, 3000, 800], reducer_tail=2000)
        end = launch(ATTN, 0, 0, end - 4000, 4, [4500, 3000, 100, 1500, 2000])  # enters 4 µs early
        end = launch(GEMV, 4096, 4096, end + 900, 4, [1200, 300, 600, 1900, 800])
        return end

    step(1_000_000)                  # an earlier recording (first run)
    t = step(50_000_000)             # the last run: chosen (as many GEMVs, later)
    step(t + 1200)                   # its next step, back to back
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "s.csv")
        open(path, "w").write("\n".join(rows) + "\n")
        out = subprocess.run([sys.executable, script, path, "--json"], capture_output=True, text=True, check=True).stdout
        text = subprocess.run([sys.executable, script, path], capture_output=True, text=True, check=True).stdout
    got = json.loads(out)
    ok = True

    def expect(kind, key, want, tol=0.02):
        nonlocal ok
        v = got[kind][key]
        if abs(v - want) > tol:
            print(f"FAIL {kind} {key}: {v} (expected {want})")
            ok = False

    # Attention: past its wait 4.5 µs after entry; entered 4 µs before the GEMV before it ended.
    expect("attention", "tiles", 3.0)
    expect("attention", "sync1", 1.5)
    expect("attention", "merge", 2.0)
    expect("attention", "entry", -4.0)
    expect("attention", "waited", 0.5)
    expect("attention", "qStaged", 0.55)
    expect("attention", "lastKeyTile", 2.5)
    # GEMV 4096x4096 (no reducer): phases as built; enters 0.9 µs after the attention's end.
    expect("gemv 4096x4096", "stage", 0.6)
    expect("gemv 4096x4096", "loop", 1.9)
    expect("gemv 4096x4096", "entry", 0.9)
    expect("gemv 4096x4096", "issue", 1.2)
    # GEMV 6144x4096: its reducer's tail, and the launches of both steps in the chosen run.
    expect("gemv 6144x4096", "reduce", 2.8)
    expect("gemv 6144x4096", "tail", 0.8)
    expect("gemv 6144x4096", "loop", 3.0)
    if got["attention"]["launches"] != 2 or got["gemv 4096x4096"]["launches"] != 2:
        print(f"FAIL launches: {got}")
        ok = False
    if "chosen run: 6 launches" not in text or "9 launches in 2 runs" not in text:
        print("FAIL the table's run:\n" + text)
        ok = False
    print("PASS" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

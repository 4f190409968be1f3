#!/usr/bin/env python3
"""Fidelity and speed of the estimate mode of the sensitivity sweep against the exact sweep
(docs/analysis.md, "Estimate mode: fidelity"; docs/benchmarks.md, "Sensitivity: estimate vs exact").

usage: scripts/sensitivity/fidelity.py MODEL --text SWEEP_TEXT --heldout HELDOUT_TEXT
           [--tokens 511] [--ctx C] [--formats F,F,...] [--budgets 4.5,5.5] [--heldout-tokens 2047]
           [--jobs 1] [--probe-tokens N] [--probes one|family] [--refine [--refine-budget P]]
           [--build build] [--out DIR [--reuse]] [--backend cpu]

One calibration (stored in a session both sweeps reuse), then on the same SWEEP_TEXT tokens:
  exact     quantscope-cli sensitivity --mode exact    (every cell measured end to end)
  estimate  quantscope-cli sensitivity --mode estimate --compare exact.json
            (one probe per layer, the rest gain x output error; Spearman rho of its KL against
            the exact table's, per format and pooled over every cell)
  refined   (--refine) the estimate with --refine-bits BUDGETS: the estimated cells that decide
            each budget's plan measured end to end (--refine-budget forward passes)
then at each budget a plan from each table (`plan auto --budget-bits B`), and the plans' real KL
with every layer fake-quantised at once (`plan measure`) on held-out text. --reuse takes the
calibration and sweeps an earlier run left in --out instead of running them again. Prints a Markdown
table; the raw outputs stay in --out. Nothing here is hard-coded: every figure comes from the CLI.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def run(cmd, out_path=None):
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seconds = time.monotonic() - t0
    if out_path:
        with open(out_path, "w") as f:
            f.write(p.stdout)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        return None, seconds, p.stderr.strip().splitlines()[-1] if p.stderr.strip() else "failed"
    return p.stdout, seconds, None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model")
    ap.add_argument("--text", required=True, help="text of the calibration and both sweeps")
    ap.add_argument("--heldout", required=True, help="text the plans' real KL is measured on")
    ap.add_argument("--tokens", default="511")
    ap.add_argument("--ctx", default="")
    ap.add_argument("--formats", default="", help="candidate formats (default: the sweep's default seven)")
    ap.add_argument("--budgets", default="4.5,5.5")
    ap.add_argument("--heldout-tokens", default="2047")
    ap.add_argument("--jobs", default="1")
    ap.add_argument("--probe-tokens", default="", help="estimate mode: probe tokens (default: the budget's)")
    ap.add_argument("--probes", default="", help="estimate mode: one | family (sensitivity --probes; default: its default)")
    ap.add_argument("--refine", action="store_true", help="also the estimate refined at the budgets' frontiers")
    ap.add_argument("--refine-budget", default="", help="--refine: forward passes for the frontier cells")
    ap.add_argument("--reuse", action="store_true", help="reuse the calibration and sweeps found in --out")
    ap.add_argument("--build", default=os.path.join(os.path.dirname(__file__), "..", "..", "build"))
    ap.add_argument("--backend", default="cpu")
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    cli = [os.path.join(a.build, "bin", "quantscope-cli"), "--backend", a.backend]
    out = a.out or tempfile.mkdtemp(prefix="fidelity-")
    os.makedirs(out, exist_ok=True)
    session = os.path.join(out, "s.qsession")
    ctx = ["--ctx", a.ctx] if a.ctx else []
    fmts = ["--formats", a.formats] if a.formats else []
    common = [a.model, "--session", session, "--text", a.text, "--tokens", a.tokens] + ctx

    def step(name, cmd):
        """Runs cmd (output in name.json), or with --reuse reads what an earlier run left."""
        path = os.path.join(out, name + ".json")
        if a.reuse and os.path.exists(path):
            with open(path) as f:
                return f.read(), 0.0
        text, seconds, err = run(cmd, path)
        if err:
            sys.exit(name + ": " + err)
        return text, seconds

    if not a.reuse and os.path.exists(session):
        os.remove(session)
    _, cal_s = step("calibrate", cli + ["calibrate"] + common + ["--json"])
    tables = {"exact": os.path.join(out, "exact.json"), "fast": os.path.join(out, "fast.json")}
    sweep = cli + ["sensitivity"] + common + fmts + ["--jobs", a.jobs, "--json"]
    text, exact_s = step("exact.out", sweep + ["--mode", "exact", "--table", tables["exact"]])
    exact = json.loads(text)
    probe = (["--probe-tokens", a.probe_tokens] if a.probe_tokens else []) + (["--probes", a.probes] if a.probes else [])
    text, fast_s = step("fast.out", sweep + ["--mode", "estimate", "--table", tables["fast"], "--compare", tables["exact"]]
                        + probe)
    fast = json.loads(text)
    refined, refined_s = None, 0.0
    if a.refine:
        tables["refined"] = os.path.join(out, "refined.json")
        extra = ["--refine-budget", a.refine_budget] if a.refine_budget else []
        text, refined_s = step("refined.out", sweep + ["--mode", "estimate", "--table", tables["refined"], "--compare",
                                                       tables["exact"], "--refine-bits", a.budgets] + probe + extra)
        refined = json.loads(text)
    names = ["exact", "fast"] + (["refined"] if a.refine else [])

    rows = []
    for b in [x for x in a.budgets.split(",") if x]:
        plans, note = [], ""
        for name in names:
            path = os.path.join(out, "plan-%s-%s.json" % (name, b))
            _, _, err = run(cli + ["plan", "auto", a.model, "--sensitivity", tables[name], "--budget-bits", b, "-o", path,
                                   "--json"], os.path.join(out, "plan-%s-%s.out.json" % (name, b)))
            if err:
                note = err
                break
            plans.append(path)
        if note:
            rows.append((b, None, note))
            continue
        text, _, err = run(cli + ["plan", "measure", a.model] + plans + ["--sensitivity", tables["exact"],
                                  "--text", a.heldout, "--tokens", a.heldout_tokens, "--json"],
                           os.path.join(out, "measure-%s.json" % b))
        if err:
            rows.append((b, None, err))
            continue
        rows.append((b, [(p["bits_per_weight"], p["measured_kl"]) for p in json.loads(text)["plans"]], ""))

    rho = {c["format"]: c for c in fast["kl_against"]["spearman"]}
    ft, xt = fast["timing"], exact["timing"]
    print("model: %s; sweep: %s, %s tokens; plans measured on %s tokens of %s" %
          (os.path.basename(a.model), a.text, a.tokens, a.heldout_tokens, a.heldout))
    print()
    print("| Spearman rho, estimate vs exact KL | n | rho |")
    print("|---|---:|---:|")
    for f, c in rho.items():
        r = c["rho"]
        print("| %s | %d | %s |" % (f, c["n"], "-" if r is None else "%.3f" % r))
    print()
    print("| sweep | cells measured | cells estimated | probe tokens | forward passes (over %d tokens) | seconds |" %
          ft["eval_tokens"])
    print("|---|---:|---:|---:|---:|---:|")
    print("| exact | %d | 0 | %d | %.1f | %.1f |" %
          (xt["cells"], xt["probe_tokens"], xt["reference_forward_equivalents"] + xt["forward_equivalents"], exact_s))
    print("| estimate | %d | %d | %d | %.1f | %.1f |" %
          (ft["cells"], ft["estimated_cells"], ft["probe_tokens"], ft["total_forward_equivalents"], fast_s))
    if refined:
        rt_ = refined["timing"]
        print("| estimate + refined (%d frontier cells, %.1f passes) | %d | %d | %d | %.1f | %.1f |" %
              (rt_["refined_cells"], rt_["refine_forward_equivalents"], rt_["cells"], rt_["estimated_cells"],
               rt_["probe_tokens"], rt_["total_forward_equivalents"], refined_s))
    print("(calibration, shared by all: %.1f s; 0 s: reused from an earlier run)" % cal_s)
    print()
    head = "| budget (bits/weight) | plan from exact: bpw, KL | plan from estimate: bpw, KL | KL lost |"
    if refined:
        head += " plan from refined: bpw, KL | KL lost |"
    print(head)
    print("|---:|---:|---:|---:|" + ("---:|---:|" if refined else ""))
    for b, plans, note in rows:
        if note:
            print("| %s | %s | | |" % (b, note.replace("|", "/")))
            continue
        bx, kx = plans[0]
        cells = ["%.3f, %.5g" % (bx, kx)]
        for bf, kf in plans[1:]:
            cells += ["%.3f, %.5g" % (bf, kf), "%+.1f %%" % (100.0 * (kf - kx) / kx)]
        print("| %s | %s |" % (b, " | ".join(cells)))
    print()
    print("raw outputs: " + out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Runs quantscope-cli over the bad-input corpus (tests/data/bad/manifest.json).

usage: run_bad_corpus.py CLI CORPUS_DIR DATASETS_DIR [CASE…]     (no CASE: every case)

For each case: the exit code must be the manifest's (2 for bad input); for a failing case
stderr must hold exactly one line — besides the informational "backend: …" line a computing
command prints before it touches the file — and that line must contain the file's name and every
expected substring (the field); the process must not crash (no signal), hang (timeout) or
allocate beyond an address-space limit (RLIMIT_AS, off under AddressSanitizer, which reserves
terabytes of shadow memory up front)."""
import json
import os
import resource
import signal
import subprocess
import sys

TIMEOUT_S = 30
ADDRESS_SPACE = 4 << 30  # 4 GiB: the corpus files are kilobytes; a claim-sized allocation is not


def limit():
    if "QS_SANITIZED" not in os.environ:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def run_case(cli, corpus, datasets, c):
    args = [a.replace("{bad}", corpus).replace("{datasets}", datasets) for a in c["args"]]
    env = dict(os.environ, OMP_NUM_THREADS="2")
    try:
        p = subprocess.run([cli] + args, capture_output=True, timeout=TIMEOUT_S, preexec_fn=limit, env=env)
    except subprocess.TimeoutExpired:
        return "hung: no exit within %d s" % TIMEOUT_S
    err = p.stderr.decode("utf-8", "replace")
    if p.returncode < 0:
        return "killed by signal %s\n%s" % (signal.Signals(-p.returncode).name, err)
    if p.returncode != c["exit"]:
        return "exit code %d, expected %d\nstderr: %s" % (p.returncode, c["exit"], err)
    if c["exit"] == 0:
        return None
    lines = [l for l in err.splitlines() if not l.startswith("backend: ")]
    if len(lines) != 1:
        return "stderr has %d lines, expected exactly one:\n%s" % (len(lines), err)
    line = lines[0]
    # The file the error names: the corpus file of the case (its base name is enough).
    files = [os.path.basename(a.rstrip("/")) for a in c["args"] if a.startswith("{bad}/")]
    named = [e for e in c["expect"] if e not in line]
    if named:
        return "stderr line lacks %s:\n%s" % (named, line)
    if not any(f in line for f in files):
        return "stderr line names none of %s:\n%s" % (files, line)
    return None


def main():
    cli, corpus, datasets = sys.argv[1:4]
    only = set(sys.argv[4:])
    with open(os.path.join(corpus, "manifest.json")) as f:
        cases = json.load(f)["cases"]
    if only:
        unknown = only - {c["case"] for c in cases}
        if unknown:
            print("unknown cases: %s" % sorted(unknown))
            return 1
        cases = [c for c in cases if c["case"] in only]
    failed = 0
    for c in cases:
        why = run_case(cli, corpus, datasets, c)
        print("%-32s %s" % (c["case"], "ok" if why is None else "FAIL: " + why))
        failed += why is not None
    print("%d of %d cases failed" % (failed, len(cases)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

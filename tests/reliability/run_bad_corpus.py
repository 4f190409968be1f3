#!/usr/bin/env python3
"""Runs quantscope-cli over a bad-input corpus (tests/data/bad/ or tests/data/bad2/, manifest.json).

usage: run_bad_corpus.py CLI CORPUS_DIR DATASETS_DIR [CASE…]     (no CASE: every case)

For each case: the exit code must be the manifest's (2 for bad input); for a failing case
stderr must hold exactly one line — besides the informational "backend: …" line a computing
command prints before it touches the file — and that line must contain the file's name and every
expected substring (the field); the process must not crash (no signal), hang (timeout) or
allocate beyond a memory limit (RLIMIT_DATA at the manifest's figure, RLIMIT_AS at 4 GiB or more;
off under AddressSanitizer, which reserves terabytes of shadow memory up front).

The manifest's "limits" (optional) set the time limit ("timeout_s", default 30) and the
address-space limit ("address_space", default 4 GiB) for all its cases. A case may ask for a
scratch folder, {tmp} in its arguments, prepared before it runs by its "setup" steps — what a
repository cannot hold: {"fifo": NAME} a named pipe, {"dir": NAME} a folder, {"sparse": NAME,
"size": N} a sparse file, {"copy": CORPUS_PATH, "to": NAME} a copy of a corpus file or folder
(so that a command that would write never touches the corpus), {"gunzip": CORPUS_PATH, "to":
NAME} a file kept compressed in the corpus. "unchanged": [PATH…] files whose bytes must be the
same after the command ({tmp} and {bad} expand)."""
import gzip
import hashlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile

TIMEOUT_S = 30
ADDRESS_SPACE = 4 << 30  # 4 GiB: the corpus files are kilobytes; a claim-sized allocation is not


def limiter(address_space):
    """The memory rule as two limits: the data limit (RLIMIT_DATA: heap and private writable
    mappings, what an allocation bomb grows) at the manifest's figure, and the address space
    (RLIMIT_AS) at no less than ADDRESS_SPACE, because a CUDA build maps its libraries' code
    (cuBLASLt alone is ~500 MB of read-only text) before main runs."""
    def limit():
        if "QS_SANITIZED" not in os.environ:
            resource.setrlimit(resource.RLIMIT_DATA, (address_space, address_space))
            vm = max(address_space, ADDRESS_SPACE)
            resource.setrlimit(resource.RLIMIT_AS, (vm, vm))
    return limit


def setup(corpus, tmp, steps):
    for s in steps:
        if "fifo" in s:
            os.mkfifo(os.path.join(tmp, s["fifo"]))
        elif "dir" in s:
            os.makedirs(os.path.join(tmp, s["dir"]), exist_ok=True)
        elif "sparse" in s:
            with open(os.path.join(tmp, s["sparse"]), "wb") as f:
                f.truncate(int(s["size"]))
        elif "copy" in s:
            src, dst = os.path.join(corpus, s["copy"]), os.path.join(tmp, s["to"])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copytree(src, dst) if os.path.isdir(src) else shutil.copyfile(src, dst)
        elif "gunzip" in s:
            dst = os.path.join(tmp, s["to"])
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            with gzip.open(os.path.join(corpus, s["gunzip"]), "rb") as i, open(dst, "wb") as o:
                shutil.copyfileobj(i, o)
        else:
            raise ValueError("unknown setup step %r" % s)


def digest(path):
    if not os.path.exists(path):
        return None
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def run_case(cli, corpus, datasets, c, limits):
    timeout = limits.get("timeout_s", TIMEOUT_S)
    with tempfile.TemporaryDirectory(prefix="qs-corpus-") as tmp:
        sub = lambda a: a.replace("{bad}", corpus).replace("{datasets}", datasets).replace("{tmp}", tmp)
        setup(corpus, tmp, c.get("setup", []))
        args = [sub(a) for a in c["args"]]
        watched = [sub(p) for p in c.get("unchanged", [])]
        before = [digest(p) for p in watched]
        env = dict(os.environ, OMP_NUM_THREADS="2", MALLOC_ARENA_MAX="2")
        try:
            p = subprocess.run([cli] + args, capture_output=True, timeout=timeout,
                               preexec_fn=limiter(limits.get("address_space", ADDRESS_SPACE)), env=env)
        except subprocess.TimeoutExpired:
            return "hung: no exit within %d s" % timeout
        for path, old in zip(watched, before):
            if digest(path) != old:
                return "changed %s (it must be left as it was)" % path
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
    # The file the error names: a corpus (or scratch) file of the case (its base name is enough).
    files = [os.path.basename(a.rstrip("/")) for a in c["args"] if a.startswith(("{bad}/", "{tmp}/", "/"))]
    named = [e for e in c["expect"] if e not in line]
    if named:
        return "stderr line lacks %s:\n%s" % (named, line)
    if files and not any(f in line for f in files):
        return "stderr line names none of %s:\n%s" % (files, line)
    return None


def main():
    cli, corpus, datasets = sys.argv[1:4]
    only = set(sys.argv[4:])
    with open(os.path.join(corpus, "manifest.json")) as f:
        manifest = json.load(f)
    cases, limits = manifest["cases"], manifest.get("limits", {})
    if only:
        unknown = only - {c["case"] for c in cases}
        if unknown:
            print("unknown cases: %s" % sorted(unknown))
            return 1
        cases = [c for c in cases if c["case"] in only]
    failed = 0
    for c in cases:
        why = run_case(cli, corpus, datasets, c, limits)
        print("%-32s %s" % (c["case"], "ok" if why is None else "FAIL: " + why))
        failed += why is not None
    print("%d of %d cases failed" % (failed, len(cases)))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

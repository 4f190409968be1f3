#!/usr/bin/env python3
"""The fuzzing table of docs/reliability.md from libFuzzer logs (what run_fuzzers.sh leaves in
$QS_FUZZ_BUILD/fuzz_<target>.log; the session target runs in fork mode).

usage: tests/fuzz/fuzz_table.py build-fuzz/fuzz_*.log"""
import os
import re
import sys

READERS = {"gguf": "GGUF", "safetensors": "safetensors", "llama2c": "llama2.c",
           "tokenizer": "tokenizer (tokenizer.json, tokenizer.bin, GGUF vocabularies; encoders)",
           "plan": "plan JSON", "session": "session HDF5"}


def row(path):
    text = open(path, errors="replace").read()
    target = re.match(r"fuzz_([a-z0-9]+)", os.path.basename(path)).group(1)
    fork = re.findall(r"#(\d+): cov: (\d+) ft: (\d+) corp: (\d+) exec/s \d+ oom/timeout/crash: (\d+)/(\d+)/(\d+) "
                      r"time: (\d+)s", text)
    if fork:  # fork mode: one status line per job, no final stats
        n, cov, ft, corp, oom, tmo, crash, secs = fork[-1]
        first_cov, rss = fork[0][1], "—"
        finds = ["%s crash" % crash] * (crash != "0") + ["%s OOM" % oom] * (oom != "0") + ["%s timeout" % tmo] * (tmo != "0")
    else:
        stat = dict(re.findall(r"stat::(\w+):\s+(\d+)", text))
        done = re.search(r"Done (\d+) runs in (\d+) second", text)
        cov = re.findall(r"#\d+\s+(?:INITED|DONE|NEW|REDUCE|pulse)\s+cov: (\d+) ft: \d+(?: corp: (\d+)/)?", text)
        n, secs, rss = stat.get("number_of_executed_units", "0"), done.group(2) if done else "?", stat.get("peak_rss_mb", "?")
        first_cov, (cov, corp) = cov[0][0], cov[-1]
        finds = re.findall(r"Test unit written to \S*/([a-z]+)-", text) or ([] if done else ["run cut short"])
    return "| %s | %s | %s | %d | %s → %s | %s | %s | %s |" % (
        READERS.get(target, target), secs, format(int(n), ","), int(n) // max(int(secs), 1) if secs != "?" else 0,
        first_cov, cov, corp or "?", rss, ", ".join(finds) or "0")


print("| reader | seconds | executions | per second | coverage (libFuzzer `cov`, seeds → end) | corpus at the end | peak RSS (MB) | findings |")
print("|---|---|---|---|---|---|---|---|")
for p in sys.argv[1:]:
    print(row(p))

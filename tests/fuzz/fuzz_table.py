#!/usr/bin/env python3
"""The fuzzing table of docs/reliability.md from libFuzzer logs (what run_fuzzers.sh leaves in
$QS_FUZZ_BUILD/fuzz_<target>.log).

usage: tests/fuzz/fuzz_table.py build-fuzz/fuzz_*.log"""
import os
import re
import sys

READERS = {"gguf": "GGUF", "safetensors": "safetensors", "llama2c": "llama2.c", "tokenizer": "tokenizer (tokenizer.json, tokenizer.bin, GGUF vocabularies; encoders)",
           "plan": "plan JSON", "session": "session HDF5"}


def row(path):
    text = open(path, errors="replace").read()
    target = re.match(r"fuzz_(\w+)\.log", os.path.basename(path)).group(1)
    stat = dict(re.findall(r"stat::(\w+):\s+(\d+)", text))
    done = re.search(r"Done (\d+) runs in (\d+) second", text)
    cov = re.findall(r"#\d+\s+(?:INITED|DONE|NEW|REDUCE|pulse)\s+cov: (\d+) ft: (\d+)(?: corp: (\d+)/)?", text)
    first, last = (cov[0], cov[-1]) if cov else (("?", "?", ""), ("?", "?", ""))
    units = re.findall(r"Test unit written to \S*/([\w-]+)", text)
    findings = ", ".join(u.split("-")[0] for u in units) if units else ("0" if done else "run cut short")
    return "| %s | %s | %s | %s | %s → %s | %s | %s | %s |" % (
        READERS.get(target, target), done.group(2) if done else "?", format(int(stat.get("number_of_executed_units", 0)), ","),
        stat.get("average_exec_per_sec", "?"), first[0], last[0], last[2] or "?", stat.get("peak_rss_mb", "?"), findings)


print("| reader | seconds | executions | per second | edges covered (seeds → end) | corpus at the end | peak RSS (MB) | findings |")
print("|---|---|---|---|---|---|---|---|")
for p in sys.argv[1:]:
    print(row(p))

"""Run the real `recemb sync` in its own process and measure it: the benchmarks that report a whole sync's peak
memory share this (the child's own maximum resident set, from ``os.wait4``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time


def run_recemb_sync(args: list[str]) -> tuple[dict, float, float]:
    """(the sync's JSON report, wall seconds, peak RSS in MiB) of ``recemb sync ARGS --json``."""
    argv = [sys.executable, "-m", "recemb_integrations.cli", "sync", *args, "--json"]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = proc.stdout.read()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        raise SystemExit(f"recemb sync exited {code}: {out[-2000:]}")
    return json.loads(out.strip().splitlines()[-1]), wall, usage.ru_maxrss / 1024

"""Helpers shared by the launcher's tests (launch_test.py, kill_trials.py,
multihost_checks.py, ../cli/batch_cli_test.py): failures collected by
check(), the live processes of a run directory and its ranks' pids, and its
events, parameters and timestamps."""
import json
import os
import time
from pathlib import Path

import numpy as np

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what, flush=True)
    return ok


def job_processes(run_dir):
    """Pids of live processes started for this run directory (their
    environment names its log folder)."""
    marker = f"GNNRT_LOG_DIR={run_dir}/logs".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in env.split(b"\0") and state != "Z":
            pids.append(int(entry.name))
    return pids


def rank_pids(run_dir):
    """rank -> pid of the current attempt, from the launcher's log."""
    pids = {}
    log = Path(run_dir) / "logs" / "launcher.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        if "] rank " in line and " registered: host " in line:
            pids[int(line.split("] rank ")[1].split()[0])] = int(line.rsplit("pid ", 1)[1])
    return pids


def events(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines()]


def params(folder):
    return {p.name: np.load(p) for p in sorted(Path(folder).glob("*.npy"))}


def iso(t):
    """Seconds since the epoch of an events.jsonl time (ISO, milliseconds)."""
    return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:23])

#!/usr/bin/python3
"""Chaos run: one long job on 4 ranks under `gnnrt launch`, with a random
fault every few seconds (the four kinds in turn, shuffled each round), from
outside, to a random rank of the attempt that is training: kill (SIGKILL), stop (SIGSTOP: no heartbeats), hang (SIGUSR1
under GNNRT_CHAOS=1: the rank's training thread stops at its next epoch,
heartbeats go on) or exit (SIGUSR2: exit status 3 at its next epoch).
Faults stop after --seconds; the job then runs to its end. Reports faults
injected and survived (the job trained past the epoch it had reached), the
time each cost (from the fault to training past that epoch again, and the
launcher's detection), and whether the final parameters equal an
uninterrupted run's bit for bit. Prints a table; JSON in
build/bench/results/chaos.json.

  /usr/bin/python3 bench/chaos.py [--gnnrt build/launch/gnnrt] [--seconds 90] [--seed S]
"""
import argparse
import json
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ap = argparse.ArgumentParser()
ap.add_argument("--gnnrt", default="build/launch/gnnrt")
ap.add_argument("--seconds", type=float, default=90, help="inject faults for this long")
ap.add_argument("--every", type=float, nargs=2, default=(2.0, 6.0),
                help="seconds of training between a recovery and the next fault (uniform)")
ap.add_argument("--epochs", type=int, default=10000)
ap.add_argument("--seed", type=int, default=None)
ap.add_argument("--out", default="build/bench/chaos")
ap.add_argument("--json", default="build/bench/results/chaos.json")
args = ap.parse_args()
seed = args.seed if args.seed is not None else time.time_ns() % 1_000_000_007
rng = random.Random(seed)
out = Path(args.out)
shutil.rmtree(out, ignore_errors=True)
out.mkdir(parents=True)
RANKS = 4
HEARTBEAT, PROGRESS = 2, 3
TRAIN = ["train", "--no-cache", "--dataset", "synthetic:nodes=4000,classes=5,features=64,avg_degree=8,seed=21",
         "--set", f"schedule.epochs={args.epochs}", "--threads", "1", "--partition", "metis"]
env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1", GNNRT_CHAOS="1")
KINDS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "hang": signal.SIGUSR1, "exit": signal.SIGUSR2}


def iso(t):
    return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:23])


def events(run):
    f = run / "events.jsonl"
    return [json.loads(line) for line in f.read_text().splitlines()] if f.exists() else []


def epochs_done(run):
    f = run / "metrics.jsonl"
    return len(f.read_text().splitlines()) if f.exists() else 0


def newest_pids(run):
    pids = {}
    log = run / "logs" / "launcher.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        if "] rank " in line and " registered: host " in line:
            pids[int(line.split("] rank ")[1].split()[0])] = int(line.rsplit("pid ", 1)[1])
    return pids


def params(folder):
    return {p.name: np.load(p) for p in sorted(Path(folder).glob("*.npy"))}


def launch(run, params_out, extra=()):
    return subprocess.Popen([args.gnnrt, "launch", "-n", str(RANKS), "--run-dir", str(run), "--max-restarts", "1000",
                             "--heartbeat-timeout", str(HEARTBEAT), "--progress-timeout", str(PROGRESS), *extra,
                             "--", *TRAIN, "--params-out", str(params_out)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)


print(f"chaos: seed {seed}; {RANKS} ranks on {os.cpu_count()} cores "
      f"({'oversubscribed' if RANKS > (os.cpu_count() or 1) else 'one core each'}); "
      f"faults for {args.seconds:.0f} s, {args.every[0]:.0f}-{args.every[1]:.0f} s of training apart", flush=True)

# The uninterrupted run, timed.
t0 = time.monotonic()
p = launch(out / "reference", out / "reference_params")
p.wait()
reference_s = time.monotonic() - t0
if p.returncode != 0:
    sys.exit(f"chaos: the uninterrupted run failed (exit {p.returncode}); see {out / 'reference'}")
reference = params(out / "reference_params")
print(f"uninterrupted: {args.epochs} epochs in {reference_s:.1f} s", flush=True)

# The chaotic run.
run = out / "chaos"
t0 = time.monotonic()
p = launch(run, out / "chaos_params")
faults = []
cycle = []
try:
    while time.monotonic() - t0 < args.seconds and p.poll() is None:
        # Training, with every rank registered in the current attempt.
        attempt = sum(1 for e in events(run) if e["event"] in ("start", "restart")) - 1
        if attempt < 0 or (attempt > 0 and not any(e["event"] == "training" and e["attempt"] == attempt
                                                   for e in events(run))) or epochs_done(run) < 1:
            time.sleep(0.05)
            continue
        time.sleep(rng.uniform(*args.every))
        if p.poll() is not None or time.monotonic() - t0 >= args.seconds:
            break
        pids = newest_pids(run)
        if not cycle:  # every kind equally often, in a random order each round
            cycle = rng.sample(list(KINDS), len(KINDS))
        kind = cycle.pop()
        rank = rng.randrange(RANKS)
        if rank not in pids:
            continue
        at_epoch = epochs_done(run)
        try:
            os.kill(pids[rank], KINDS[kind])
        except ProcessLookupError:
            continue
        faults.append({"kind": kind, "rank": rank, "pid": pids[rank], "time": time.time(), "epoch": at_epoch,
                       "attempt": attempt})
        print(f"{time.monotonic() - t0:6.1f} s: {kind} rank {rank} (pid {pids[rank]}) at epoch {at_epoch}",
              flush=True)
        # Wait for this fault's restart to train again before the next.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if any(e["event"] == "training" and e["attempt"] == attempt + 1 for e in events(run)):
                break
            time.sleep(0.05)
    p.wait(timeout=3600)
except BaseException:
    p.kill()
    raise
chaos_s = time.monotonic() - t0

# Per fault: the failure the launcher recorded, and when training passed the
# epoch the fault struck at (the training event, plus the epochs redone at
# the run's own epoch time).
ev = events(run)
ms_per_epoch = reference_s * 1e3 / args.epochs
rows = []
for f in faults:
    failure = next((e for e in ev if e["event"] == "failure" and e["attempt"] == f["attempt"]), None)
    training = next((e for e in ev if e["event"] == "training" and e["attempt"] == f["attempt"] + 1), None)
    survived = failure is not None and training is not None
    row = dict(f, survived=survived)
    if survived:
        row["detected_s"] = iso(failure["detected"]) - f["time"]
        row["launcher_kind"] = failure["kind"]
        row["resumed_after"] = training["resumed_after"]
        redo = max(0, f["epoch"] - training["resumed_after"])
        row["lost_s"] = iso(training["at"]) - f["time"] + redo * ms_per_epoch / 1e3
    rows.append(row)
final = params(out / "chaos_params") if (out / "chaos_params").exists() else {}
bitwise = bool(final) and final.keys() == reference.keys() and all(np.array_equal(final[k], reference[k])
                                                                    for k in reference)
survived = sum(r["survived"] for r in rows)

print(f"\n{'kind':6} {'faults':>6} {'survived':>8} {'detected, s (median)':>21} {'lost, s (median)':>17}")
summary = {}
for kind in KINDS:
    these = [r for r in rows if r["kind"] == kind]
    ok = [r for r in these if r["survived"]]
    det = statistics.median([r["detected_s"] for r in ok]) if ok else float("nan")
    lost = statistics.median([r["lost_s"] for r in ok]) if ok else float("nan")
    summary[kind] = {"faults": len(these), "survived": len(ok), "detected_s_median": det, "lost_s_median": lost}
    print(f"{kind:6} {len(these):6d} {len(ok):8d} {det:21.2f} {lost:17.2f}")
all_lost = [r["lost_s"] for r in rows if r["survived"]]
print(f"\n{len(faults)} faults injected, {survived} survived; the job {'finished' if p.returncode == 0 else 'FAILED'} "
      f"(exit {p.returncode}) in {chaos_s:.1f} s against {reference_s:.1f} s uninterrupted: "
      f"{(chaos_s - reference_s) / max(1, len(faults)):.2f} s lost per fault on average"
      + (f", median {statistics.median(all_lost):.2f} s" if all_lost else "")
      + f"; final parameters {'bitwise equal to' if bitwise else 'DIFFERENT from'} the uninterrupted run's")
result = {"seed": seed, "ranks": RANKS, "cores": os.cpu_count(), "epochs": args.epochs,
          "fault_seconds": args.seconds, "heartbeat_timeout_s": HEARTBEAT, "progress_timeout_s": PROGRESS,
          "reference_s": reference_s, "chaos_s": chaos_s, "faults": len(faults), "survived": survived,
          "exit": p.returncode, "bitwise_equal": bitwise, "by_kind": summary, "rows": rows,
          "date": time.strftime("%Y-%m-%d")}
Path(args.json).parent.mkdir(parents=True, exist_ok=True)
Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
print(f"JSON: {args.json}")
sys.exit(0 if p.returncode == 0 and bitwise and survived == len(faults) else 1)

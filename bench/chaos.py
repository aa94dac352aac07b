#!/usr/bin/python3
"""Chaos run: one long job on 4 ranks under `gnnrt launch`, with a random
fault every few seconds (the kinds in turn, shuffled each round), from
outside, to a random rank of the attempt that is training: kill (SIGKILL),
stop (SIGSTOP: no heartbeats), hang (SIGUSR1 under GNNRT_CHAOS=1: the rank's
training thread stops at its next epoch, heartbeats go on), exit (SIGUSR2:
exit status 3 at its next epoch), bad_checkpoint (rank 0 frozen, the newest
checkpoint made unreadable, in turn a directory of its name and a file with
a flipped byte, then rank 0 killed: the restart sets it aside and resumes
from the one before) and full_disk (the run directory's disk, a tmpfs,
filled for --full-seconds: a checkpoint, a metrics record or an event fails
to be written, restarts wait for space; root only, as it mounts).
Faults stop after --seconds; the job then runs to its end. Reports faults
injected and survived (the job trained past the epoch it had reached), the
time each cost (from the fault to training past that epoch again, and the
launcher's detection), whether the final parameters equal an uninterrupted
run's bit for bit, and whether events.jsonl and metrics.jsonl hold whole
records only. Prints a table; JSON in build/bench/results/chaos.json.

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
import threading
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
ap.add_argument("--full-seconds", type=float, default=2.0, help="how long a full_disk fault keeps the disk full")
args = ap.parse_args()
# full_disk mounts a tmpfs for the chaotic run's directory, in a mount
# namespace of this script's own (root only; without, that kind is left out).
if os.environ.get("GNNRT_CHAOS_MOUNT_NS") != "1" and os.getuid() == 0 and \
        subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode == 0:
    os.environ["GNNRT_CHAOS_MOUNT_NS"] = "1"
    os.execvp("unshare", ["unshare", "-m", sys.executable, os.path.abspath(__file__), *sys.argv[1:]])
TMPFS = os.environ.get("GNNRT_CHAOS_MOUNT_NS") == "1"
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
KINDS = {"kill": signal.SIGKILL, "stop": signal.SIGSTOP, "hang": signal.SIGUSR1, "exit": signal.SIGUSR2,
         "bad_checkpoint": None, "full_disk": None}
if not TMPFS:
    del KINDS["full_disk"]
    print("chaos: full_disk left out (it mounts a tmpfs: root and unshare needed)")
PAGE = os.sysconf("SC_PAGE_SIZE")


def iso(t):
    return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:23])


def records(path):
    """The whole records of a JSON-lines file, and the lines that are not one."""
    whole, torn = [], []
    for line in path.read_text().splitlines() if path.exists() else []:
        try:
            whole.append(json.loads(line))
        except ValueError:
            torn.append(line)
    return whole, torn


def events(run):
    return records(run / "events.jsonl")[0]


def epochs_done(run):
    return len(records(run / "metrics.jsonl")[0])


def unreadable_checkpoint(run, variant):
    """The newest checkpoint made unreadable: replaced by a directory of its
    name, or a byte of it flipped. Returns its name."""
    ckpts = sorted((run / "checkpoints").glob("ckpt-*.ckpt"))
    ckpts = [c for c in ckpts if c.is_file()]
    if not ckpts:
        return None
    newest = ckpts[-1]
    if variant == "directory":
        newest.unlink()
        newest.mkdir()
    else:
        data = bytearray(newest.read_bytes())
        data[len(data) // 2] ^= 0x10
        newest.write_bytes(bytes(data))
    return newest.name


def fill_disk(disk, seconds):
    """Keeps the disk full for `seconds` (what a failed write frees is taken
    again at once), then frees it."""
    filler = disk / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        try:
            os.write(fd, b"\0" * PAGE)
        except OSError:
            time.sleep(0.0002)
    os.close(fd)
    filler.unlink()


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

# The chaotic run, on a disk of its own when full_disk is in.
disk = out / "chaos_disk"
disk.mkdir()
if TMPFS:
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256m", "tmpfs", str(disk)], check=True)
run = disk / "chaos"
variants = ["directory", "flipped"]
t0 = time.monotonic()
p = launch(run, out / "chaos_params")
faults = []
cycle = []
try:
    while time.monotonic() - t0 < args.seconds and p.poll() is None:
        # Training, with every rank registered in the current attempt.
        ev = events(run)
        attempt = max((e["attempt"] for e in ev if e["event"] in ("start", "restart", "training")), default=-1)
        if attempt < 0 or (attempt > 0 and not any(e["event"] == "training" and e["attempt"] == attempt
                                                   for e in ev)) or epochs_done(run) < 1:
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
        what = ""
        when = time.time()
        try:
            if kind == "bad_checkpoint":
                rank = 0  # the writer, frozen while its newest checkpoint is spoilt
                os.kill(pids[0], signal.SIGSTOP)
                variant = variants[len([f for f in faults if f["kind"] == kind]) % 2]
                spoilt = unreadable_checkpoint(run, variant)
                os.kill(pids[0], signal.SIGKILL)
                what = f" ({spoilt}: {variant})"
            elif kind == "full_disk":
                rank = -1
                threading.Thread(target=fill_disk, args=(disk, args.full_seconds)).start()
                what = f" (for {args.full_seconds:.1f} s)"
            else:
                os.kill(pids[rank], KINDS[kind])
        except ProcessLookupError:
            continue
        faults.append({"kind": kind, "rank": rank, "pid": pids.get(rank, 0), "time": when, "epoch": at_epoch,
                       "attempt": attempt})
        print(f"{time.monotonic() - t0:6.1f} s: {kind}{what} " + (f"rank {rank} (pid {pids[rank]}) " if rank >= 0 else "")
              + f"at epoch {at_epoch}", flush=True)
        # Wait for this fault's restart to train again before the next.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and p.poll() is None:
            if any(e["event"] == "training" and e["attempt"] > attempt for e in events(run)):
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
    # A full disk may keep the failure record out of events.jsonl (the
    # launcher says so on its console): detection is then not measured.
    failure = next((e for e in ev if e["event"] == "failure" and e["attempt"] == f["attempt"]), None)
    training = next((e for e in ev if e["event"] == "training" and e["attempt"] > f["attempt"]), None)
    survived = training is not None and (failure is not None or f["kind"] == "full_disk")
    row = dict(f, survived=survived)
    if survived:
        row["detected_s"] = iso(failure["detected"]) - f["time"] if failure else None
        row["launcher_kind"] = failure["kind"] if failure else None
        row["resumed_after"] = training["resumed_after"]
        redo = max(0, f["epoch"] - training["resumed_after"])
        row["lost_s"] = iso(training["at"]) - f["time"] + redo * ms_per_epoch / 1e3
    rows.append(row)
final = params(out / "chaos_params") if (out / "chaos_params").exists() else {}
bitwise = bool(final) and final.keys() == reference.keys() and all(np.array_equal(final[k], reference[k])
                                                                    for k in reference)
survived = sum(r["survived"] for r in rows)

print(f"\n{'kind':14} {'faults':>6} {'survived':>8} {'detected, s (median)':>21} {'lost, s (median)':>17}")
summary = {}
for kind in KINDS:
    these = [r for r in rows if r["kind"] == kind]
    ok = [r for r in these if r["survived"]]
    measured = [r["detected_s"] for r in ok if r["detected_s"] is not None]
    det = statistics.median(measured) if measured else float("nan")
    lost = statistics.median([r["lost_s"] for r in ok]) if ok else float("nan")
    summary[kind] = {"faults": len(these), "survived": len(ok), "detected_s_median": det, "lost_s_median": lost}
    print(f"{kind:14} {len(these):6d} {len(ok):8d} {det:21.2f} {lost:17.2f}")
all_lost = [r["lost_s"] for r in rows if r["survived"]]
# Whole records only, whatever struck while they were written.
torn = {name: records(run / name)[1] for name in ("events.jsonl", "metrics.jsonl")}
leftovers = [str(x) for x in run.rglob("*") if ".tmp" in x.name]
set_aside = sorted(x.name for x in (run / "checkpoints").glob("*.corrupt*"))
whole = not any(torn.values()) and not leftovers
print(f"records: events.jsonl {len(events(run))} whole, {len(torn['events.jsonl'])} torn; metrics.jsonl "
      f"{epochs_done(run)} whole, {len(torn['metrics.jsonl'])} torn; temporary files left: {len(leftovers)}; "
      f"checkpoints set aside: {len(set_aside)}")
print(f"\n{len(faults)} faults injected, {survived} survived; the job {'finished' if p.returncode == 0 else 'FAILED'} "
      f"(exit {p.returncode}) in {chaos_s:.1f} s against {reference_s:.1f} s uninterrupted: "
      f"{(chaos_s - reference_s) / max(1, len(faults)):.2f} s lost per fault on average"
      + (f", median {statistics.median(all_lost):.2f} s" if all_lost else "")
      + f"; final parameters {'bitwise equal to' if bitwise else 'DIFFERENT from'} the uninterrupted run's")
result = {"seed": seed, "ranks": RANKS, "cores": os.cpu_count(), "epochs": args.epochs,
          "fault_seconds": args.seconds, "heartbeat_timeout_s": HEARTBEAT, "progress_timeout_s": PROGRESS,
          "reference_s": reference_s, "chaos_s": chaos_s, "faults": len(faults), "survived": survived,
          "exit": p.returncode, "bitwise_equal": bitwise, "by_kind": summary, "rows": rows,
          "torn_records": {k: len(v) for k, v in torn.items()}, "temporary_files_left": leftovers,
          "checkpoints_set_aside": set_aside, "full_disk": TMPFS, "full_seconds": args.full_seconds,
          "date": time.strftime("%Y-%m-%d")}
Path(args.json).parent.mkdir(parents=True, exist_ok=True)
Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
print(f"JSON: {args.json}")
if TMPFS:  # the tmpfs goes with this script's mount namespace: its records are kept beside the JSON
    for name in ("events.jsonl", "metrics.jsonl"):
        shutil.copy(run / name, out / f"chaos_{name}")
    shutil.copytree(run / "logs", out / "chaos_logs")
    subprocess.run(["umount", "-l", str(disk)])
sys.exit(0 if p.returncode == 0 and bitwise and survived == len(faults) and whole else 1)

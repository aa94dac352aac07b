#!/usr/bin/python3
"""A rank killed at any moment loses nothing: TRIALS launches of one job
under `gnnrt launch`, each killing one rank by pid (SIGKILL from outside,
not the rank's own fault injection) after a random wall-clock delay into
training, wherever it is (in a step, an all-reduce, a halo exchange, writing
metrics), and WRITES more killing rank 0 while it writes a checkpoint (the
write slowed by the test switch GNNRT_TEST_SLOW_CHECKPOINT, the kill sent
once its temporary file exists). Each trial prints its seed and asserts:

  - the launcher restarts the job once and it finishes (exit 0);
  - it resumed after exactly the epoch of the newest complete checkpoint on
    disk once the killed attempt was gone (read by this test itself, during
    the launcher's --restart-delay, from the files' headers), which the
    launcher's failure record names too; a kill during a checkpoint write
    resumes from the one before;
  - the final parameters are bitwise those of an uninterrupted run;
  - no temporary checkpoint file and no process of the job is left.

Usage: kill_trials.py GNNRT [TRIALS WRITES]   (ctest; WORK from $GNNRT_WORK,
GNNRT_TEST_SEED fixes the first trial's seed)
"""
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from launch_common import check, events, failures, iso, job_processes, params, rank_pids

GNNRT = sys.argv[1]
TRIALS = int(sys.argv[2]) if len(sys.argv) > 2 else 16
WRITES = int(sys.argv[3]) if len(sys.argv) > 3 else 4
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_kill_trials"))
RANKS = 4
EPOCHS = 40
DATASET = "synthetic:nodes=2000,classes=4,features=32,avg_degree=8,seed=11"
# A checkpoint every 4 epochs: a kill loses up to 4 (the same bits either way).
EVERY = 4
TRAIN = ["train", "--no-cache", "--dataset", DATASET, "--set", f"schedule.epochs={EPOCHS}", "--threads", "1",
         "--partition", "metis", "--set", f"checkpoint.every={EVERY}"]
MAGIC = b"gnnrtck2"


def newest_complete_checkpoint(folder):
    """The epoch of the newest file in `folder` whose header and length are
    whole (the launcher's own check also verifies the checksum), and the
    temporary files there."""
    best, temporary = 0, []
    for f in Path(folder).iterdir() if Path(folder).exists() else []:
        name = f.name
        if ".tmp." in name:
            temporary.append(name)
            continue
        if not (name.startswith("ckpt-") and name.endswith(".ckpt")):
            continue
        data = f.read_bytes()
        if len(data) < 24 or data[:8] != MAGIC or struct.unpack("<Q", data[8:16])[0] != len(data) - 24:
            continue
        best = max(best, int(name[5:-5]))
    return best, temporary


def metrics_lines(run_dir):
    f = run_dir / "metrics.jsonl"
    return len(f.read_text().splitlines()) if f.exists() else 0


def trial(name, seed, reference, during_write, training_s):
    print(f"{name}: seed {seed}{' (a kill during a checkpoint write)' if during_write else ''}", flush=True)
    rng = random.Random(seed)
    run_dir = WORK / name
    shutil.rmtree(run_dir, ignore_errors=True)
    out_params = WORK / f"{name}_params"
    env = dict(os.environ)
    if during_write:
        env["GNNRT_TEST_SLOW_CHECKPOINT"] = "0.4"
    argv = [GNNRT, "launch", "-n", str(RANKS), "--run-dir", str(run_dir), "--max-restarts", "1", "--restart-delay",
            "0.5", "--", *TRAIN, "--params-out", str(out_params)]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    try:
        # Training has begun once rank 0 wrote its first epoch.
        deadline = time.monotonic() + 120
        while metrics_lines(run_dir) < 1 and time.monotonic() < deadline and p.poll() is None:
            time.sleep(0.005)
        ckpt = run_dir / "checkpoints"
        if during_write:
            victim = 0  # the writer
            skip = rng.randint(1, 3)  # into the write of the (skip)th checkpoint from now
            seen = set()
            tmp = None
            while time.monotonic() < deadline and p.poll() is None:
                _, temporary = newest_complete_checkpoint(ckpt)
                fresh = [t for t in temporary if t not in seen]
                seen.update(temporary)
                if fresh:
                    skip -= 1
                    if skip == 0:
                        tmp = fresh[0]
                        break
                time.sleep(0.002)
            writing = int(tmp[5:13]) if tmp else None
            time.sleep(rng.uniform(0, 0.2))  # somewhere inside the 0.4 s write
            what = f"while writing checkpoint {writing}"
        else:
            victim = rng.randrange(RANKS)
            delay = rng.uniform(0, 0.9 * training_s)
            time.sleep(delay)
            what = f"{delay:.3f} s into training, at epoch {metrics_lines(run_dir)}"
        pid = rank_pids(run_dir).get(victim)
        lines_at_kill = metrics_lines(run_dir)
        killed_at = time.monotonic()
        if pid is None or p.poll() is not None:
            check(False, f"{name} (seed {seed}): no pid for rank {victim}, or the job ended before the kill")
            p.kill()
            p.communicate()
            return
        os.kill(pid, signal.SIGKILL)
        # The attempt is over once its failure is recorded (every process of
        # it stopped); the restart waits 0.5 s: read the folder meanwhile.
        expected = None
        while time.monotonic() < killed_at + 60:
            ev = events(run_dir) if (run_dir / "events.jsonl").exists() else []
            if any(e["event"] == "failure" for e in ev):
                expected, _ = newest_complete_checkpoint(ckpt)
                read_at = time.time()
                break
            time.sleep(0.01)
        out, _ = p.communicate(timeout=240)
    except BaseException:
        p.kill()
        raise
    ev = events(run_dir)
    kinds = [e["event"] for e in ev if e["event"] != "notice"]  # notices: checked where they matter
    failure = next((e for e in ev if e["event"] == "failure"), {})
    restart = next((e for e in ev if e["event"] == "restart"), {})
    training = next((e for e in ev if e["event"] == "training"), {})
    resumed = training.get("resumed_after")
    print(f"{name}: rank {victim} (pid {pid}) killed {what}; newest complete checkpoint then "
          f"{expected}, resumed after {resumed}", flush=True)
    # Independent of what is on disk: when rank 0 had written epoch m's
    # metrics, the checkpoints up to epoch m - 1 were complete (it writes a
    # checkpoint before the next epoch's metrics), and none beyond m + 1
    # can follow once a rank is gone. A run that stopped checkpointing would
    # expect, and resume from, nothing.
    if expected is not None and not during_write:
        low = EVERY * ((lines_at_kill - 1) // EVERY)
        check(low <= expected <= lines_at_kill + 1,
              f"{name} (seed {seed}): {lines_at_kill} epochs written at the kill, so the newest checkpoint "
              f"should be in [{low}, {lines_at_kill + 1}], not {expected}")
    check(p.returncode == 0, f"{name} (seed {seed}): exit {p.returncode}\n{out[-3000:]}")
    check(kinds == ["start", "failure", "restart", "training", "finish"], f"{name} (seed {seed}): events {kinds}")
    check(failure.get("rank") == victim, f"{name} (seed {seed}): failure record {failure}")
    check(expected is not None and restart and read_at < iso(restart["time"]),
          f"{name} (seed {seed}): the checkpoint folder was not read between the failure and the restart")
    check(resumed == expected, f"{name} (seed {seed}): resumed after epoch {resumed}, the newest complete "
                               f"checkpoint was {expected}")
    check(failure.get("checkpoint", {}).get("epoch") == expected,
          f"{name} (seed {seed}): the launcher's failure record names checkpoint {failure.get('checkpoint')}, "
          f"expected epoch {expected}")
    check(not during_write or writing is not None,
          f"{name} (seed {seed}): no temporary checkpoint file was seen, so the kill was not during a write")
    if during_write and writing is not None:
        check(expected == writing - EVERY, f"{name} (seed {seed}): killed while writing checkpoint {writing}, "
                                           f"but the newest complete one was {expected}, not {writing - EVERY}")
    got = params(out_params) if out_params.exists() else {}
    check(got and set(got) == set(reference) and all(np.array_equal(got[k], reference[k]) for k in reference),
          f"{name} (seed {seed}): parameters differ from the uninterrupted run's")
    _, temporary = newest_complete_checkpoint(run_dir / "checkpoints")
    check(not temporary, f"{name} (seed {seed}): temporary checkpoint files left: {temporary}")
    time.sleep(0.3)
    check(not job_processes(run_dir), f"{name} (seed {seed}): processes survive: {job_processes(run_dir)}")


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
ref_dir = WORK / "reference"
p = subprocess.run([GNNRT, "launch", "-n", str(RANKS), "--run-dir", str(ref_dir), "--", *TRAIN, "--params-out",
                    str(WORK / "reference_params")], capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"reference: exit {p.returncode}\n{(p.stdout + p.stderr)[-3000:]}")
reference = params(WORK / "reference_params")
check(len(reference) >= 4, f"reference: {len(reference)} parameters written")
# How long training lasts once its first epoch is written: the kills land
# within it.
ms = [__import__("json").loads(line)["ms"] for line in (ref_dir / "metrics.jsonl").read_text().splitlines()[1:]]
training_s = sum(ms) / 1e3
print(f"reference: {EPOCHS} epochs on {RANKS} ranks, {training_s:.2f} s after the first", flush=True)
first = int(os.environ.get("GNNRT_TEST_SEED", str(time.time_ns() % 1_000_000_007)))
print(f"{TRIALS} kills at random moments and {WRITES} during checkpoint writes; first seed {first}", flush=True)
if reference:
    for i in range(TRIALS + WRITES):
        trial(f"trial{i:02d}", first + i, reference, during_write=i >= TRIALS, training_s=training_s)
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print(f"all {TRIALS + WRITES} kill trials passed")

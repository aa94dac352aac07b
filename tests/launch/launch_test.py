#!/usr/bin/python3
"""`gnnrt launch` on one host: a job's run directory (metrics.jsonl, per-rank
logs, events.jsonl, job.pbtxt), a rank killed with SIGKILL and restarted
(final parameters bitwise equal to an uninterrupted run), a hung rank caught
by the progress timeout, a silent (SIGSTOPped) one by the heartbeat timeout,
--max-restarts 0 failing fast with its summary, SIGINT stopping at a step
boundary with a checkpoint that a second launch resumes, the single-rank
debug mode, `launch -- bench collectives`, and the control protocol fuzzed
while a real job runs. After every launch, no process of the job may be
left (checked through /proc).

Usage: launch_test.py GNNRT (run by ctest; WORK from $GNNRT_WORK)
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from launch_common import (check, enter_launcher_network, events, failures, iso, job_listeners, job_processes,
                           leave_network, params, rank_pids)

GNNRT = sys.argv[1]
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_launch_test"))
# The sanitizer suite (GNNRT_TEST_QUICK=1) runs each path of the launcher's
# code once: the plain run, a kill and restart, a silent rank 0 restarted,
# the launcher killed, the fuzzed control protocol with the token checks and
# a restart, bad input. The Release suite runs every scenario.
QUICK = os.environ.get("GNNRT_TEST_QUICK") == "1"
DATASET = "synthetic:nodes=600,classes=4,features=16,avg_degree=6,seed=3"
EPOCHS = 10
TRAIN = ["train", "--no-cache", "--dataset", DATASET, "--set", f"schedule.epochs={EPOCHS}",
         "--threads", "1"]
figures = {}


def launch(name, ranks, *args, command=None, timeout=240, expect=0):
    run_dir = WORK / name
    shutil.rmtree(run_dir, ignore_errors=True)
    argv = [GNNRT, "launch", "-n", str(ranks), "--run-dir", str(run_dir), *args, "--", *(command or TRAIN)]
    start = time.monotonic()
    p = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    took = time.monotonic() - start
    out = p.stdout + p.stderr
    check(p.returncode == expect, f"{name}: exit {p.returncode}, expected {expect}\n{out[-4000:]}")
    time.sleep(0.5)
    left = job_processes(run_dir)
    check(not left, f"{name}: processes of the job survive the launcher: {left}")
    return run_dir, out, took


def metrics(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def stamp(line):
    """Seconds since the epoch of a log line's timestamp."""
    t = time.strptime(line[:19], "%Y-%m-%d %H:%M:%S")
    return time.mktime(t) + float("0" + line[19:23])


def fault_time(run_dir, rank):
    for line in (run_dir / "logs" / f"rank-{rank}.log").read_text().splitlines():
        if "fault injection" in line:
            return stamp(line)
    return None


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)

# ---- an uninterrupted 4-rank run: the run directory as documented ----
ref, out, _ = launch("plain", 4, command=TRAIN + ["--params-out", str(WORK / "plain_params")])
m = metrics(ref)
check([r["epoch"] for r in m] == list(range(1, EPOCHS + 1)), f"plain: metrics epochs {[r['epoch'] for r in m]}")
check(all(r["ranks"] == 4 and np.isfinite(r["loss"]) and 0 <= r["val_acc"] <= 1 for r in m),
      f"plain: implausible metrics {m[:2]}")
for k in range(4):
    log = (ref / "logs" / f"rank-{k}.log").read_text().splitlines()
    check(log and all(f"[rank {k} host " in line for line in log), f"plain: rank-{k}.log lines lack rank and host")
ev = events(ref)
check(ev[0]["event"] == "start" and "mpirun" in ev[0]["command"] and ev[-1]["event"] == "finish",
      f"plain: events {ev}")
check("schedule" in (ref / "job.pbtxt").read_text(), "plain: job.pbtxt has no schedule")
check((ref / "checkpoints").is_dir() and any((ref / "checkpoints").iterdir()), "plain: no checkpoint")
check("gnnrt launch: mpirun" in out and (("--oversubscribe" in out) == ((os.cpu_count() or 1) < 4)),
      f"plain: the mpirun command is not printed, or oversubscription is wrong for {os.cpu_count()} cores:\n{out}")
check(re.search(rf"epoch {EPOCHS}/{EPOCHS} loss", out) is not None, f"plain: no final progress line:\n{out}")
plain = params(WORK / "plain_params")
check(len(plain) >= 4, f"plain: {len(plain)} parameters written")

# The finished run directory launched again: it resumes from the final
# checkpoint with no epoch left, and says so (the `training` event comes
# with rank 0's end, as after a kill that lands past the last epoch).
again = subprocess.run([GNNRT, "launch", "-n", "4", "--run-dir", str(ref), "--", *TRAIN, "--params-out",
                        str(WORK / "again_params")], capture_output=True, text=True, timeout=240)
check(again.returncode == 0, f"again: exit {again.returncode}\n{(again.stdout + again.stderr)[-3000:]}")
ev_again = events(ref)[len(ev):]
check([e["event"] for e in ev_again if e["event"] != "notice"] == ["start", "training", "finish"]
      and ev_again[1].get("resumed_after") == EPOCHS, f"again: events {ev_again}")
again_params = params(WORK / "again_params")
check(set(again_params) == set(plain) and all(np.array_equal(again_params[k], plain[k]) for k in plain),
      "again: parameters from the final checkpoint differ from the run's")

# ---- checkpoint folder entries that are not checkpoints, and none at all ----
# A directory named like the newest checkpoint: set aside (renamed, not
# removed), the previous one used, and both said on the console and in
# events.jsonl; no restart. Then every checkpoint deleted: "no checkpoint
# found", as a warning, and training from epoch 1.
odd = WORK / "odd_checkpoints"
shutil.rmtree(odd, ignore_errors=True)
shutil.copytree(ref, odd)
ckpts = odd / "checkpoints"
(ckpts / f"ckpt-{EPOCHS + 1:08}.ckpt" / "inside").mkdir(parents=True)
more = [a if a != f"schedule.epochs={EPOCHS}" else f"schedule.epochs={EPOCHS + 2}" for a in TRAIN]
before = len(events(odd))
p = subprocess.run([GNNRT, "launch", "-n", "2", "--run-dir", str(odd), "--", *more], capture_output=True, text=True,
                   timeout=240)
out = p.stdout + p.stderr
said = (f"gnnrt launch: rank 0: warning: checkpoint {ckpts}/ckpt-{EPOCHS + 1:08}.ckpt: a directory, not a file "
        f"(set aside as ckpt-{EPOCHS + 1:08}.ckpt.corrupt); resuming from the previous checkpoint, "
        f"{ckpts}/ckpt-{EPOCHS:08}.ckpt")
check(p.returncode == 0 and said in out, f"odd checkpoint: exit {p.returncode}, or no warning {said!r}:\n{out[-3000:]}")
new_events = events(odd)[before:]
check([e["event"] for e in new_events if e["event"] != "notice"] == ["start", "training", "finish"]
      and any(e["event"] == "notice" and e["level"] == "warning" and "a directory, not a file" in e["message"]
              for e in new_events)
      and next(e for e in new_events if e["event"] == "training")["resumed_after"] == EPOCHS,
      f"odd checkpoint: events {new_events}")
check((ckpts / f"ckpt-{EPOCHS + 1:08}.ckpt.corrupt" / "inside").is_dir(), "odd checkpoint: the directory is gone")
for f in ckpts.glob("ckpt-*.ckpt"):
    shutil.rmtree(f) if f.is_dir() else f.unlink()
before = len(events(odd))
p = subprocess.run([GNNRT, "launch", "-n", "2", "--run-dir", str(odd), "--", *more], capture_output=True, text=True,
                   timeout=240)
out = p.stdout + p.stderr
said = f"gnnrt launch: rank 0: warning: no checkpoint found in {ckpts}, starting at epoch 1"
check(p.returncode == 0 and said in out, f"no checkpoint: exit {p.returncode}, or no warning {said!r}:\n{out[-3000:]}")
check(any(e["event"] == "notice" and e["level"] == "warning" and "no checkpoint found" in e["message"]
          for e in events(odd)[before:]), f"no checkpoint: no warning in events.jsonl: {events(odd)[before:]}")
check(len(metrics(odd)) == EPOCHS + 2 and metrics(odd)[0]["epoch"] == 1,
      f"no checkpoint: metrics epochs {[m['epoch'] for m in metrics(odd)][:4]}...")

subprocess.run([GNNRT, *TRAIN, "--params-out", str(WORK / "one_params")], check=True, capture_output=True)
one = params(WORK / "one_params")
check(all(np.allclose(one[k], plain[k], rtol=1e-5, atol=1e-6) for k in one), "plain: 4 launched ranks differ from 1 rank")

# ---- kill -9 of one rank at a random epoch: restarted, bitwise equal ----
seed = int(os.environ.get("GNNRT_TEST_SEED", str(time.time_ns() % 1_000_000_007)))
print(f"seed {seed} (GNNRT_TEST_SEED={seed} repeats this run's random choices)", flush=True)
rng = random.Random(seed)
at = rng.randint(2, EPOCHS - 1)
victim = rng.randint(0, 3)
print(f"killing rank {victim} after epoch {at}", flush=True)
run, out, _ = launch("kill", 4, "--inject-fault", f"kill:{victim}:{at}", "--max-restarts", "2",
                     command=TRAIN + ["--params-out", str(WORK / "kill_params")])
ev = events(run)
kinds = [e["event"] for e in ev if e["event"] != "notice"]  # notices: checked where they matter
check(kinds == ["start", "failure", "restart", "training", "finish"], f"kill: events {kinds}")
fail = next((e for e in ev if e["event"] == "failure"), {})
check(fail.get("rank") == victim and "signal 9" in fail.get("mpirun", ""), f"kill: failure record {fail}")
killed = params(WORK / "kill_params")
check(set(killed) == set(plain) and all(np.array_equal(killed[k], plain[k]) for k in plain),
      "kill: parameters after the restart are not bitwise equal to the uninterrupted run's")
m = metrics(run)
check([r["epoch"] for r in m] == list(range(1, EPOCHS + 1)), f"kill: metrics epochs {[r['epoch'] for r in m]}")
if fail:
    t_fault = fault_time(run, victim)
    training = next((e for e in ev if e["event"] == "training"), None)
    check(training is not None and training["attempt"] == 1, f"kill: no training event after the restart: {ev}")
    # It resumed from the newest checkpoint (epoch at - 1 or at), not from scratch.
    check(training is not None and training["resumed_after"] in (at - 1, at),
          f"kill: resumed after epoch {training and training['resumed_after']}, killed after {at}")
    figures["kill_detect_s"] = iso(fail["detected"]) - t_fault if t_fault else None
    if training:
        figures["kill_training_again_s"] = iso(training["at"]) - iso(fail["detected"])

if not QUICK:
    # ---- a rank killed after it reported its work done (in MPI_Finalize):
    # mpirun's status is the only trace, and the failure record still names
    # the rank; the restart resumes after the last epoch and finishes ----
    run, out, _ = launch("killdone", 2, "--inject-fault", "killdone:1:1", "--max-restarts", "1",
                         command=TRAIN + ["--params-out", str(WORK / "killdone_params")])
    fail = next((e for e in events(run) if e["event"] == "failure"), {})
    check(fail.get("rank") == 1 and fail.get("kind") == "exit" and "signal 9" in fail.get("mpirun", ""),
          f"killdone: failure record {fail}")
    check(fail.get("checkpoint", {}).get("epoch") == EPOCHS, f"killdone: failure record {fail}")

if not QUICK:  # fail fast
    # ---- --max-restarts 0: fails fast, with the summary of the first failure ----
    run, out, took = launch("fail_fast", 2, "--inject-fault", "exit:1:2", "--max-restarts", "0", expect=1)
    check("first failure: rank 1" in out and "last lines of" in out and "fault injection" in out,
          f"fail_fast: summary does not name rank 1 with its log:\n{out}")
    check(took < 30, f"fail_fast: took {took:.1f} s")

# ---- hung, silent and never-registering ranks: detected, restarted, and the
# job ends with the uninterrupted parameters, resumed after the exact epoch
# (the fault strikes after epoch `at`: rank 0 writes that epoch's checkpoint
# unless it is itself the one that stopped) ----
def same_params(folder, reference, what):
    got = params(folder) if folder.exists() else {}
    check(got and set(got) == set(reference) and all(np.array_equal(got[k], reference[k]) for k in reference),
          f"{what}: parameters after the restart are not bitwise the uninterrupted run's")


def resumed_after(run_dir):
    training = next((e for e in events(run_dir) if e["event"] == "training"), {})
    return training.get("resumed_after")


ref3, _, _ = launch("plain3", 3, command=TRAIN + ["--params-out", str(WORK / "plain3_params")])
plain3 = params(WORK / "plain3_params")
if not QUICK:  # the 2-rank reference
    ref2, _, _ = launch("plain2", 2, command=TRAIN + ["--params-out", str(WORK / "plain2_params")])
    plain2 = params(WORK / "plain2_params")
    check(len(plain3) >= 4 and set(plain3) == set(plain2), "plain2/plain3: parameters not written")
check(len(plain3) >= 4, "plain3: parameters not written")

if not QUICK:  # hang, restarted
    run, out, took = launch("hang", 3, "--inject-fault", "hang:2:3", "--progress-timeout", "3", "--max-restarts", "1",
                            command=TRAIN + ["--params-out", str(WORK / "hang_params")])
    check("no progress for" in out and "every rank is at epoch 3" in out,
          f"hang: not caught by the progress timeout:\n{out}")
    check(resumed_after(run) == 3, f"hang: resumed after {resumed_after(run)}, expected 3")
    same_params(WORK / "hang_params", plain3, "hang")
    t = fault_time(run, 2)
    fail = next((e for e in events(run) if e["event"] == "failure"), None)
    if t and fail:
        figures["hang_detect_s"] = iso(fail["detected"]) - t

# SIGSTOP (no heartbeats either), of rank 0: its checkpoint of epoch 3 is
# never written, so the restart resumes after epoch 2.
run, out, took = launch("silent", 3, "--inject-fault", "silent:0:3", "--heartbeat-timeout", "3",
                        "--max-restarts", "1", command=TRAIN + ["--params-out", str(WORK / "silent_params")])
check("sent no heartbeat" in out and "rank 0" in out, f"silent: not caught by the heartbeat timeout:\n{out}")
check(resumed_after(run) == 2, f"silent: resumed after {resumed_after(run)}, expected 2")
same_params(WORK / "silent_params", plain3, "silent")
t = fault_time(run, 0)
fail = next((e for e in events(run) if e["event"] == "failure"), None)
if t and fail:
    figures["silent_detect_s"] = iso(fail["detected"]) - t

if not QUICK:  # never registers, restarted
    # A rank that never registers (it trains all the same): the start timeout,
    # then a restart from where the unwatched attempt got to. Checkpoint writes
    # slowed to 0.4 s, so the first attempt is still training at the timeout.
    os.environ["GNNRT_TEST_SLOW_CHECKPOINT"] = "0.4"
    run, out, took = launch("noregister", 2, "--inject-fault", "noregister:1:1", "--start-timeout", "2",
                            "--max-restarts", "1", command=TRAIN + ["--params-out", str(WORK / "noregister_params")])
    del os.environ["GNNRT_TEST_SLOW_CHECKPOINT"]
    check("did not register within 2 s" in out and "rank(s) 1" in out, f"noregister: not caught:\n{out[-2000:]}")
    fail = next((e for e in events(run) if e["event"] == "failure"), {})
    check(resumed_after(run) == fail.get("checkpoint", {}).get("epoch") and (resumed_after(run) or 0) > 0,
          f"noregister: resumed after {resumed_after(run)}, the newest checkpoint was {fail.get('checkpoint')}")
    same_params(WORK / "noregister_params", plain2, "noregister")

# ---- the launcher itself killed (SIGKILL): every rank ends within the
# heartbeat timeout plus the grace period, and nothing of the job is left ----
run_dir = WORK / "launcher_killed"
shutil.rmtree(run_dir, ignore_errors=True)
endless = [a if a != f"schedule.epochs={EPOCHS}" else "schedule.epochs=1000000" for a in TRAIN]
p = subprocess.Popen([GNNRT, "launch", "-n", "3", "--run-dir", str(run_dir), "--heartbeat-timeout", "3", "--grace",
                      "2", "--", *endless], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    f = run_dir / "metrics.jsonl"
    if f.exists() and len(f.read_text().splitlines()) >= 3:
        break
    time.sleep(0.05)
check(len(job_processes(run_dir)) >= 4, f"launcher killed: expected mpirun and 3 ranks, found {job_processes(run_dir)}")
p.kill()
p.wait()
t0 = time.monotonic()
while job_processes(run_dir) and time.monotonic() - t0 < 20:
    time.sleep(0.05)
gone_after = time.monotonic() - t0
check(not job_processes(run_dir) and gone_after <= 3 + 2,
      f"launcher killed: processes of the job left after {gone_after:.1f} s: {job_processes(run_dir)}")
figures["launcher_killed_all_gone_s"] = gone_after

if not QUICK:  # resize
    # ---- resumed by the launcher at another rank count: 6 epochs on 3 ranks,
    # then the rest on 2, equal to 2 ranks throughout within float rounding ----
    six = [a if a != f"schedule.epochs={EPOCHS}" else "schedule.epochs=6" for a in TRAIN]
    run, out, _ = launch("resize", 3, command=six)
    p = subprocess.run([GNNRT, "launch", "-n", "2", "--run-dir", str(run), "--", *TRAIN, "--params-out",
                        str(WORK / "resize_params")], capture_output=True, text=True, timeout=240)
    check(p.returncode == 0, f"resize: exit {p.returncode}\n{(p.stdout + p.stderr)[-3000:]}")
    check(resumed_after(run) == 6, f"resize: resumed after {resumed_after(run)}, expected 6")
    resized = params(WORK / "resize_params") if (WORK / "resize_params").exists() else {}
    check(resized and set(resized) == set(plain2) and
          all(np.allclose(resized[k], plain2[k], rtol=1e-5, atol=1e-6) for k in plain2),
          "resize: 6 epochs on 3 ranks and 4 on 2 differ from 10 on 2 beyond rtol 1e-5")

if not QUICK:  # SIGINT, debug, bench
    # ---- SIGINT: a checkpoint at the next step boundary; a second launch resumes ----
    long_train = [a if a != f"schedule.epochs={EPOCHS}" else "schedule.epochs=400" for a in TRAIN]
    run_dir = WORK / "sigint"
    shutil.rmtree(run_dir, ignore_errors=True)
    argv = [GNNRT, "launch", "-n", "2", "--run-dir", str(run_dir), "--", *long_train]
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        f = run_dir / "metrics.jsonl"
        if f.exists() and len(f.read_text().splitlines()) >= 3:
            break
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    out, _ = p.communicate(timeout=120)
    check(p.returncode == 130, f"sigint: exit {p.returncode}, expected 130\n{out[-3000:]}")
    kinds = [e["event"] for e in events(run_dir)]
    check("stop_requested" in kinds and kinds[-1] == "stopped", f"sigint: events {kinds}")
    stopped_at = len(metrics(run_dir))
    check(3 <= stopped_at < 400, f"sigint: stopped after {stopped_at} epochs")
    check(not job_processes(run_dir), "sigint: processes survive")
    p = subprocess.run([GNNRT, "launch", "-n", "2", "--run-dir", str(run_dir), "--", *long_train, "--params-out",
                        str(WORK / "sigint_params")], capture_output=True, text=True, timeout=300)
    check(p.returncode == 0, f"sigint resume: exit {p.returncode}\n{(p.stdout + p.stderr)[-3000:]}")
    check([r["epoch"] for r in metrics(run_dir)] == list(range(1, 401)), "sigint resume: metrics are not epochs 1..400")
    straight, _, _ = launch("straight", 2, command=long_train + ["--params-out", str(WORK / "straight_params")])
    a, b = params(WORK / "sigint_params"), params(WORK / "straight_params")
    check(set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a),
          "sigint: stopped and resumed parameters differ from an uninterrupted run's")

    # ---- one rank, --debug: the debug output is kept ----
    run, out, _ = launch("debug", 1, command=TRAIN + ["--debug"])
    check("debug mode" in (run / "logs" / "rank-0.log").read_text(), "debug: rank-0.log does not show debug mode")

    # ---- bench collectives through the launcher ----
    run, out, _ = launch("bench", 2, command=["bench", "collectives", "--op", "allreduce", "--algorithm", "ring",
                                              "--max-bytes", "4096", "--seconds", "0.02"])
    check("allreduce" in out and "busbw" in out.lower(), f"bench: no table:\n{out[-2000:]}")
    run, out, _ = launch("bench_halo", 2, command=["bench", "halo", "--nodes", "2000", "--seconds", "0.05"])
    check("dense allreduce" in out and "halo p2p" in out, f"bench halo: no table:\n{out[-2000:]}")


# ---- the control protocol, fuzzed while a real job runs ----
def varint(n):
    b = bytearray()
    while True:
        b.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
        n >>= 7
        if not n:
            return bytes(b)


def field(number, payload):
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def frame(payload):
    return varint(len(payload)) + payload


# A job that would run for minutes: fuzzed, then stopped with SIGINT.
fuzz_train = [a if a != f"schedule.epochs={EPOCHS}" else "schedule.epochs=1000000" for a in TRAIN]
run_dir = WORK / "fuzz"
shutil.rmtree(run_dir, ignore_errors=True)
p = subprocess.Popen([GNNRT, "launch", "-n", "2", "--run-dir", str(run_dir), "--", *fuzz_train],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def epochs_done():
    f = run_dir / "metrics.jsonl"
    return len(f.read_text().splitlines()) if f.exists() else 0


deadline = time.monotonic() + 120
while epochs_done() < 2 and time.monotonic() < deadline:
    time.sleep(0.05)
# Nothing of a single-host job listens where a network reaches it: every
# listener of the launcher, mpirun and the ranks is on loopback or inside
# the job's own network namespace that has only loopback.
listeners = job_listeners([p.pid, *job_processes(run_dir)])
check(listeners, "network: no listening socket of the job found (not even the control server's)")
exposed = [(pid, str(a), port) for pid, a, port, reachable in listeners if reachable and not a.is_loopback]
check(not exposed, f"network: the job listens on addresses a network reaches: {exposed}")
print(f"network: {len(listeners)} listener(s) of the job, none reachable from a network")
# Every rank has registered: the appfile with their tokens is gone.
check(not list((run_dir / "launch").glob("appfile-*")), "network: the appfile outlives the ranks' registration")
# The control server is in that namespace: the attacks below come from there.
address, home_network = enter_launcher_network(run_dir)
hello = field(1, field(1, b"not-the-token") + bytes([0x10, 0x00]))  # RankMessage{hello{token, rank 0}}
attacks = {
    "wrong token": frame(hello),
    "oversized length": varint(1 << 30) + b"x" * 64,
    "malformed length": b"\xff" * 8,
    "truncated frame": varint(100) + b"abc",
    "not a hello": frame(varint(2 << 3 | 0) + b"\x01"),
    "garbage message": frame(b"\xff\xff\xff\xff\x0f\x12"),
}
for i in range(40):
    attacks[f"random {i}"] = bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 300)))
before = epochs_done()
for name, data in attacks.items():
    try:
        with socket.create_connection(address, timeout=5) as s:
            s.sendall(data)
            if name == "truncated frame" or name.startswith("random"):
                continue  # closed by the client mid-frame
            s.settimeout(3)
            try:
                s.recv(100)  # the launcher closes the connection
            except (socket.timeout, ConnectionError):
                pass
    except OSError as e:
        check(False, f"fuzz: cannot connect for {name!r}: {e}")
# 40 clients that send nothing: past the cap of 32 waiting connections the
# rest are refused; all are dropped after the 5 s hello timeout. One more
# trickles a frame a byte at a time: dropped at the same timeout.
trickle = socket.create_connection(address, timeout=5)
slow = []
for _ in range(40):
    try:
        slow.append(socket.create_connection(address, timeout=5))
    except OSError:
        pass
trickle_closed = None
log = run_dir / "logs" / "launcher.log"
deadline = time.monotonic() + 20
t0 = time.monotonic()
while time.monotonic() < deadline and trickle_closed is None:
    try:
        trickle.sendall(b"\x40")  # a frame of 64 bytes, one byte at a time
        time.sleep(0.25)
    except OSError:
        trickle_closed = time.monotonic() - t0
check(trickle_closed is not None and trickle_closed < 10, f"fuzz: a trickling client was not dropped ({trickle_closed})")
while "no valid hello within" not in log.read_text() and time.monotonic() < deadline:
    time.sleep(0.1)
for s in slow:
    s.close()
after = epochs_done()
check(p.poll() is None and after > before, f"fuzz: the job stopped training while fuzzed ({before} -> {after} epochs)")


# ---- a process holding one rank's token (read from that rank's
# environment, as anything of the same user could): it cannot register as
# another rank, nor again as that rank, nor in a later attempt, and what it
# sends is not taken for the rank's; the job goes on undisturbed ----
def hello(token, rank, size, attempt):
    body = field(1, token.encode()) + bytes([0x10]) + varint(rank) + bytes([0x18]) + varint(size) + \
        bytes([0x30]) + varint(attempt)
    return frame(field(1, body))


def done_frame(status):
    return frame(field(4, bytes([0x08]) + varint(status)))  # RankMessage{done{status}}


def progress_frame(epoch):
    return frame(field(3, bytes([0x08]) + varint(epoch)))  # RankMessage{progress{epoch}}


def token_of(pid):
    for v in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
        if v.startswith(b"GNNRT_LAUNCH_TOKEN="):
            return v.split(b"=", 1)[1].decode()
    return None


def send_and_wait_for(data, line_text, what):
    """Sends `data` on a new connection; the launcher's log must gain a line
    with `line_text` (the refusal) within 5 s."""
    count = log.read_text().count(line_text)
    with socket.create_connection(address, timeout=5) as conn:
        conn.sendall(data)
        deadline = time.monotonic() + 5
        while log.read_text().count(line_text) == count and time.monotonic() < deadline:
            time.sleep(0.02)
    check(log.read_text().count(line_text) > count, f"control: {what}: launcher.log has no new {line_text!r}")


pids0 = rank_pids(run_dir)
token1 = token_of(pids0[1]) if 1 in pids0 else None
check(token1 is not None and len(token1) == 64, f"control: rank 1's token not found in its environment ({token1})")
check(token1 != token_of(pids0.get(0, 0)), "control: ranks 0 and 1 hold the same token")
if token1:
    send_and_wait_for(hello(token1, 0, 2, 0), "wrong token for rank 0 of attempt 0", "rank 1's token claiming rank 0")
    send_and_wait_for(hello(token1, 1, 2, 0) + progress_frame(999) + done_frame(3),
                      "refused a hello from rank 1 of 2 (attempt 0", "a second hello for registered rank 1")
    send_and_wait_for(done_frame(3), "first message is not a hello", "a Done from an unregistered connection")
    send_and_wait_for(hello(token1, 1, 2, 1), "wrong token for rank 1 of attempt 1",
                      "attempt 0's token claiming attempt 1")
    check(p.poll() is None, "control: the launcher ended")
    kinds = [e["event"] for e in events(run_dir)]
    check("failure" not in kinds, f"control: the job was disturbed: events {kinds}")
    # A restart (rank 1 killed by us): attempt 1 refuses attempt 0's token.
    os.kill(pids0[1], signal.SIGKILL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not any(e["event"] == "training" for e in events(run_dir)):
        time.sleep(0.05)
    check(any(e["event"] == "training" and e["attempt"] == 1 for e in events(run_dir)),
          f"control: no restart after rank 1 was killed: {[e['event'] for e in events(run_dir)]}")
    send_and_wait_for(hello(token1, 1, 2, 0), "refused a hello from rank 1 of 2 (attempt 0",
                      "attempt 0's token after the restart")
    send_and_wait_for(hello(token1, 1, 2, 1), "wrong token for rank 1 of attempt 1",
                      "attempt 0's token claiming attempt 1 after the restart")
    new_token = token_of(rank_pids(run_dir)[1])
    check(new_token and new_token != token1, "control: rank 1's token did not change with the attempt")
    time.sleep(0.5)
    check(p.poll() is None and epochs_done() > after, "control: the job stopped training")
leave_network(home_network)
p.send_signal(signal.SIGTERM)
out, _ = p.communicate(timeout=240)
check(p.returncode == 143, f"fuzz: exit {p.returncode} after SIGTERM, expected 143\n{out[-3000:]}")
text = log.read_text()
for reason in ("wrong token", "exceeds the limit", "malformed frame length", "first message is not a hello",
               "malformed message", "inside a frame", "no valid hello within", "waiting to register"):
    check(reason in text, f"fuzz: launcher.log does not log a drop for {reason!r}")
kinds = [e["event"] for e in events(run_dir)]
check(kinds.count("failure") == 1 and kinds.count("restart") == 1 and kinds[-1] == "stopped",
      f"fuzz: the real job was disturbed beyond the one kill: events {kinds}")
check(not job_processes(run_dir), "fuzz: processes survive")

if not QUICK:  # two signals
    # ---- a second signal stops at once ----
    run_dir = WORK / "twice"
    shutil.rmtree(run_dir, ignore_errors=True)
    p = subprocess.Popen([GNNRT, "launch", "-n", "2", "--run-dir", str(run_dir), "--", *fuzz_train],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while epochs_done() < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    p.send_signal(signal.SIGINT)
    p.send_signal(signal.SIGINT)
    t0 = time.monotonic()
    out, _ = p.communicate(timeout=120)
    check(p.returncode == 130 and time.monotonic() - t0 < 20, f"twice: exit {p.returncode} after two SIGINTs\n{out[-2000:]}")
    time.sleep(0.5)
    check(not job_processes(run_dir), "twice: processes survive")

# ---- bad input is not retried ----
run, out, took = launch("bad_input", 2, "--max-restarts", "3", command=TRAIN + ["--set", "dataset.path=npy:/nonexistent"],
                        expect=1)
check([e["event"] for e in events(run)].count("restart") == 0 and "not restarting" in out,
      f"bad_input: restarted or no reason given:\n{out[-2000:]}")

# ---- --hosts that are all this host (by name and by one of its addresses):
# a single-host job, in its own loopback-only network namespace ----
mine = subprocess.run(["hostname", "-I"], capture_output=True, text=True).stdout.split()
for hosts in ["localhost:2"] + ([f"{mine[0]}:1,localhost:1"] if mine and not QUICK else []):
    run, out, took = launch("hosts_" + hosts.split(":")[0], 2, "--hosts", hosts)
    command = next((line for line in out.splitlines() if line.startswith("gnnrt launch: mpirun")), "")
    check("--host " not in command and "btl self,vader" in command,
          f"--hosts {hosts}: not run as a single-host job:\n{out[:1500]}")
    check(json.loads((run / "control.json").read_text())["network_namespace"] != "",
          f"--hosts {hosts}: no network namespace of its own")

# ---- a label at int64's extreme in a batch dataset: refused when it is
# read, naming the file and row, as bad input: not restarted ----
golden = Path(__file__).resolve().parents[1] / "golden" / "batch" / "graph_classes"
data = WORK / "int64_label_data"
shutil.rmtree(data, ignore_errors=True)
shutil.copytree(golden / "data", data)
y = np.load(data / "graph.y.npy")
y[3] = np.iinfo(np.int64).max
np.save(data / "graph.y.npy", y)
job = WORK / "int64_label.pbtxt"
job.write_text((golden / "job.pbtxt").read_text().replace("DATA", str(data)))
run, out, took = launch("int64_label", 2, "--max-restarts", "3", command=["train", str(job), "--no-cache"], expect=1)
check([e["event"] for e in events(run)].count("restart") == 0 and "not restarting" in out
      and "graph.y.npy (graph_target): label 9223372036854775807 at row 3" in out,
      f"int64_label: restarted, or the error does not name the file and row:\n{out[-2000:]}")

if not QUICK:  # terminal
    # ---- on a terminal: one progress line, rewritten in place ----
    run_dir = WORK / "tty"
    shutil.rmtree(run_dir, ignore_errors=True)
    cmd = " ".join([GNNRT, "launch", "-n", "2", "--run-dir", str(run_dir), "--", *TRAIN])
    p = subprocess.run(["script", "-qec", cmd, "/dev/null"], capture_output=True, timeout=120)  # bytes: keep \r
    check(p.returncode == 0 and b"\r\x1b[K" in p.stdout and f"epoch {EPOCHS}/{EPOCHS}".encode() in p.stdout,
          f"tty: no in-place progress line (exit {p.returncode}):\n{p.stdout[-1000:]!r}")

print("detection figures (s):", json.dumps({k: round(v, 3) for k, v in figures.items() if v is not None}))
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all launcher checks passed")

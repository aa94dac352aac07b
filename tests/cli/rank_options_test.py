#!/usr/bin/python3
"""Ranks started with different options (MPMD: `mpirun -np 1 gnnrt ... : -np 1
gnnrt ...`): every option that changes what a rank computes, writes or waits
for must stop every rank at start, within 10 s, with one error line per rank
naming the option and which ranks hold which value, exit status 2 and no
step run. Each option at 2 ranks (rank 0 differs) and at 3 (rank 1 differs).

Before the start-up comparison, --debug or --trace on one rank hung until
the collective deadline, --params-in or --logits-out failed after about 10 s
with a generic message, and --params-out or --metrics on one rank were
silently ignored.

Usage: rank_options_test.py GNNRT MPIRUN... (run by ctest; WORK from $GNNRT_WORK)
"""
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

GNNRT = os.path.abspath(sys.argv[1])
MPIRUN = sys.argv[2:]
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_rank_options"))
COMMON = ["--no-cache", "--dataset", "synthetic:nodes=240,classes=3,features=8,avg_degree=6,seed=5",
          "--set", "schedule.epochs=2"]
QUICK = os.environ.get("GNNRT_TEST_QUICK") == "1"
LIMIT = 10.0  # seconds from mpirun's start to every rank's error
failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what)


def mpmd(parts, env=None):
    """Runs one rank per part: [(subcommand args, {VAR: value})]; returns (status, output, seconds).
    A variable named -wdir is the rank's working folder."""
    args = list(MPIRUN)
    for i, (argv, variables) in enumerate(parts):
        args += ["-np", "1"]
        for name, value in variables.items():
            args += ["-wdir", value] if name == "-wdir" else ["-x", f"{name}={value}"]
        args += [GNNRT, *argv] + ([":"] if i + 1 < len(parts) else [])
    start = time.monotonic()
    p = subprocess.run(args, capture_output=True, text=True, timeout=120, env=env)
    return p.returncode, p.stdout + p.stderr, time.monotonic() - start


def expect_refused(name, parts, message):
    status, out, seconds = mpmd(parts)
    errors = [line for line in out.splitlines() if line.startswith("gnnrt: error:")]
    ranks = len(parts)
    check(status == 2, f"{name} at {ranks} ranks: exit {status}, expected 2\n{out[-2000:]}")
    check(len(errors) == ranks, f"{name} at {ranks} ranks: {len(errors)} error lines:\n" + "\n".join(errors))
    check(all(message in line for line in errors),
          f"{name} at {ranks} ranks: not every error says {message!r}:\n" + "\n".join(errors))
    check(seconds < LIMIT, f"{name} at {ranks} ranks: {seconds:.1f} s to refuse (limit {LIMIT} s)")
    check(re.search(r"epoch +1/", out) is None, f"{name} at {ranks} ranks: a step ran before the error")
    print(f"{name} at {ranks} ranks: refused in {seconds:.2f} s")


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
params = WORK / "params"
p = subprocess.run([GNNRT, "train", *COMMON, "--params-out", str(params)], capture_output=True, text=True, timeout=120)
check(p.returncode == 0, f"writing the parameters: {p.stderr[-2000:]}")
tuning = WORK / "tuning.pbtxt"
tuning.write_text('measured_on: "rank_options_test"\nrule { op: "allreduce" algorithm: "ring" }\n')
tuning_other = WORK / "other" / "tuning.pbtxt"
tuning_other.parent.mkdir()
tuning_other.write_text('measured_on: "rank_options_test"\nrule { op: "allreduce" algorithm: "native" }\n')

# (option as given on one rank, the words the error must hold). Every option
# of `gnnrt train` that is not part of the job (the job's fields are compared
# field by field: shards_cli) and not --threads (bitwise the same results).
TRAIN = [
    (["--debug"], "--debug is"),
    (["--trace", str(WORK / "trace.json")], "--trace is"),
    (["--params-in", str(params)], "--params-in is"),
    (["--params-out", str(WORK / "out")], "--params-out is"),
    (["--logits-out", str(WORK / "logits.npy")], "--logits-out is"),
    (["--metrics", str(WORK / "m.jsonl")], "--metrics is"),
    (["--params-non-strict"], "--params-non-strict is"),
    (["--params-scope", "conv1"], "--params-scope is"),
    (["--collective-algorithm", "ring"], "--collective-algorithm is"),
    (["--collective-timeout", "30"], "--collective-timeout is"),
    (["--collective-tuning", str(tuning)], "--collective-tuning is"),
    (["--profile", "trn2"], "--profile is"),
    (["--hbm-bytes", "1000000000"], "--hbm-bytes is"),
    (["--cache-dir", str(WORK / "cache")], "--cache-dir is"),
    (["--no-cache"], None),  # COMMON has it: handled below
]
# The sanitizer suite (GNNRT_TEST_QUICK=1) runs one of each kind at 2 ranks
# (a mode, an output file, a collective setting, the device): the code that
# compares them is one loop, and each case costs seconds of MPI start-up.
if QUICK:
    TRAIN = [t for t in TRAIN if t[0][0] in ("--debug", "--metrics", "--collective-algorithm", "--profile")]
for option, message in TRAIN:
    name = " ".join(option[:1])
    if message is None:
        # Every rank but one without --no-cache.
        plain = [a for a in COMMON if a != "--no-cache"]
        expect_refused(name, [(["train", *plain, "--cache-dir", str(WORK / "c")], {}),
                              (["train", *plain, "--cache-dir", str(WORK / "c"), "--no-cache"], {})],
                       "--no-cache is not given on rank 0, true on rank 1")
        continue
    expect_refused(name, [(["train", *COMMON, *option], {}), (["train", *COMMON], {})], message)
    if not QUICK:
        expect_refused(name, [(["train", *COMMON], {}), (["train", *COMMON, *option], {}), (["train", *COMMON], {})],
                       message)

if QUICK:
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("rank options: every difference refused at start (quick)")
    sys.exit(0)

# The same value everywhere but on one rank; the message names both.
expect_refused("--collective-timeout values", [(["train", *COMMON, "--collective-timeout", "30"], {}),
                                               (["train", *COMMON, "--collective-timeout", "40"], {})],
               "--collective-timeout is 30 on rank 0, 40 on rank 1")
# The collectives' environment, and a tuning table named alike whose bytes differ.
expect_refused("GNNRT_COLLECTIVE_TIMEOUT", [(["train", *COMMON], {"GNNRT_COLLECTIVE_TIMEOUT": "30"}),
                                            (["train", *COMMON], {"GNNRT_COLLECTIVE_TIMEOUT": "40"})],
               "$GNNRT_COLLECTIVE_TIMEOUT is 30 on rank 0, 40 on rank 1")
expect_refused("GNNRT_COLLECTIVE_ALGORITHM", [(["train", *COMMON], {"GNNRT_COLLECTIVE_ALGORITHM": "ring"}),
                                              (["train", *COMMON], {}), (["train", *COMMON], {})],
               "$GNNRT_COLLECTIVE_ALGORITHM is ring on rank 0")
expect_refused("GNNRT_COLLECTIVE_CHECK", [(["train", *COMMON], {"GNNRT_COLLECTIVE_CHECK": "1"}),
                                          (["train", *COMMON], {"GNNRT_COLLECTIVE_CHECK": "0"})],
               "$GNNRT_COLLECTIVE_CHECK is 1 on rank 0, 0 on rank 1")
# The same relative path in two working folders: the same name, other bytes.
expect_refused("tuning table bytes",
               [(["train", *COMMON, "--collective-tuning", "tuning.pbtxt"], {"-wdir": str(WORK)}),
                (["train", *COMMON, "--collective-tuning", "tuning.pbtxt"], {"-wdir": str(tuning_other.parent)})],
               "the tuning table's bytes is xxh64")

# gnnrt infer and the benchmarks compare their options the same way.
batch_job = Path(__file__).resolve().parents[2] / "examples" / "molecules_gin.pbtxt"
expect_refused("infer --output", [(["infer", str(batch_job), "--params-in", str(params), "--out", str(WORK / "o"),
                                    "--output", "head"], {}),
                                  (["infer", str(batch_job), "--params-in", str(params), "--out", str(WORK / "o")], {})],
               "--output is head on rank 0, not given on rank 1")
expect_refused("bench --op", [(["bench", "collectives", "--op", "allreduce", "--max-bytes", "64"], {}),
                              (["bench", "collectives", "--op", "allgather", "--max-bytes", "64"], {})],
               "--op is allreduce on rank 0, allgather on rank 1")

# --threads is not compared: results are bitwise the same on any thread count.
status, out, _ = mpmd([(["train", *COMMON, "--partition", "metis", "--threads", "1"], {}),
                       (["train", *COMMON, "--partition", "metis", "--threads", "2"], {})])
check(status == 0, f"--threads 1 and 2 on the ranks: exit {status}\n{out[-2000:]}")

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("rank options: every difference refused at start")

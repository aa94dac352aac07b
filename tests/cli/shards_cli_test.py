#!/usr/bin/python3
"""`gnnrt partition` and `gnnrt train --shards` end to end, and every way the
shards or the ranks can be wrong: each must end in an error on every rank
(one `gnnrt: error:` line per rank, exit status 2), before any step, within
the test's timeout, never in a hang.

Usage: shards_cli_test.py GNNRT MPIRUN... (run by ctest; WORK from $GNNRT_WORK)
"""
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from cli_common import check, damaged_copy, expect_error_on_every_rank, finish, run

GNNRT = sys.argv[1]
MPIRUN = sys.argv[2:]
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_shards_cli"))
DATASET = "synthetic:nodes=240,classes=3,features=8,avg_degree=6,seed=5"
COMMON = ["--no-cache", "--dataset", DATASET, "--set", "schedule.epochs=2"]
# The sanitizer suite (GNNRT_TEST_QUICK=1) runs one case of each kind of
# check added with the whole-job fingerprint, the flips, the degenerate
# inputs and colour; the Release suite runs them all.
QUICK = os.environ.get("GNNRT_TEST_QUICK") == "1"


def train(ranks, *extra, mpmd=None):
    if mpmd:
        args = list(MPIRUN)
        for i, part in enumerate(mpmd):
            args += (["-np", "1", GNNRT, "train", *COMMON, *part] + ([":"] if i + 1 < len(mpmd) else []))
        return run(args)
    return run([*MPIRUN, "-np", str(ranks), GNNRT, "train", *COMMON, *extra])


def expect_refused(ranks, message, *extra, mpmd=None, status=2):
    code, out = train(ranks, *extra, mpmd=mpmd)
    expect_error_on_every_rank(code, out, ranks, message, status)
    check(re.search(r"epoch +1/", out) is None, f"{message!r}: a step ran before the error")


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
shards = WORK / "s2"

# Partition once; the statistics are printed and in the manifest.
code, out = run([GNNRT, "partition", "--parts", "2", "--method", "metis", "--out", str(shards),
                 "--dataset", DATASET])
check(code == 0, f"gnnrt partition: exit {code}\n{out}")
for text in ("replication factor", "edge balance", "halo rows", "halo bytes per epoch"):
    check(text in out, f"gnnrt partition prints no {text!r}")
manifest = (shards / "manifest.pbtxt").read_text()
check("replication_factor" in manifest and "xxh64" in manifest, "manifest lacks statistics or checksums")



def metrics_of(path):
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


# Training from the shards works, and gives the in-memory partition's numbers
# exactly (the same arrays, read back instead of cut at start-up). Every
# rank traces its ops, halo exchanges among them.
trace = WORK / "trace.json"
code, from_shards = train(2, "--shards", str(shards), "--metrics", str(WORK / "shards.jsonl"),
                          "--trace", str(trace))
check(code == 0, f"train --shards: exit {code}\n{from_shards[-3000:]}")
code, in_memory = train(2, "--partition", "metis", "--metrics", str(WORK / "memory.jsonl"))
check(code == 0, f"train --partition metis: exit {code}")
keys = ("loss", "train_acc", "val_acc", "test_acc", "halo_bytes")
a = [[e[k] for k in keys] for e in metrics_of(WORK / "shards.jsonl")]
b = [[e[k] for k in keys] for e in metrics_of(WORK / "memory.jsonl")]
check(len(a) == 2 and a == b, f"shards {a} != in memory {b}")
for path in (trace, WORK / "trace.rank-1.json"):
    events = json.loads(path.read_text())["traceEvents"] if path.exists() else []
    check(any(e.get("name") == "halo_sum" and e.get("ph") == "X" for e in events),
          f"{path.name}: no halo_sum events")



def manifest_field(text, name):
    return [int(v) for v in re.findall(rf"^\s*{name}: (\d+)$", text, re.M)]


def measured_halo_bytes(job_args, shard_dir):
    metrics = WORK / "metrics.jsonl"
    metrics.unlink(missing_ok=True)
    code, out = run([*MPIRUN, "-np", "2", GNNRT, "train", *job_args, *COMMON, "--shards", str(shard_dir),
                     "--metrics", str(metrics)])
    check(code == 0, f"train --shards {shard_dir}: exit {code}\n{out[-3000:]}")
    if not metrics.exists():
        return []
    return [json.loads(line)["halo_bytes"] for line in metrics.read_text().splitlines()]


# The bytes the trainer's halo ops send are the bytes the partition predicts,
# exactly: per epoch, all ranks, and per rank summing to it. A GCN (halo sums
# only) and a model with every kind of exchange (SAGE max: keyed rows with
# edge ids; GAT: the softmax's max and sums).
whole = manifest_field(manifest, "halo_bytes_per_epoch")
check(len(whole) == 3 and whole[-1] > 0 and whole[0] + whole[1] == whole[2],
      f"manifest halo_bytes_per_epoch (2 ranks, then all): {whole}")
measured = measured_halo_bytes([], shards)
check(measured and all(b == whole[-1] for b in measured),
      f"GCN: measured halo bytes {measured} != predicted {whole[-1]}")
job = WORK / "sage_gat.pbtxt"
job.write_text("""model {
  layer { type: SAGE out: 8 aggr: MAX }
  layer { type: RELU }
  layer { type: DROPOUT p: 0.5 }
  layer { type: GAT heads: 2 concat: false }
}
""")
mixed = WORK / "mixed_model"
code, out = run([GNNRT, "partition", str(job), "--parts", "2", "--method", "random", "--out", str(mixed),
                 "--dataset", DATASET])
check(code == 0 and "halo_max (conv1)" in out and "halo_max (conv2)" in out,
      f"gnnrt partition of SAGE max + GAT: exit {code}\n{out}")
predicted = manifest_field((mixed / "manifest.pbtxt").read_text(), "halo_bytes_per_epoch")[-1]
measured = measured_halo_bytes([str(job)], mixed)
check(measured and all(b == predicted for b in measured),
      f"SAGE max + GAT: measured halo bytes {measured} != predicted {predicted}")

expect_refused(3, "holds shards for 2 ranks, but the job runs on 3", "--shards", str(shards))


def damaged(name, damage):
    return damaged_copy(shards, WORK / name, damage)


missing = damaged("missing", lambda d: (d / "rank-1" / "x.npy").unlink())
expect_refused(2, "x.npy: missing", "--shards", str(missing))
expect_refused(2, "reading the shards failed on rank 1", "--shards", str(missing))


def truncate(d):
    f = d / "rank-0" / "y.npy"
    f.write_bytes(f.read_bytes()[:-16])


expect_refused(2, "y.npy: data has", "--shards", str(damaged("truncated", truncate)))


def flip(d):
    f = d / "rank-1" / "x.npy"
    b = bytearray(f.read_bytes())
    b[-5] ^= 0x20
    f.write_bytes(bytes(b))


expect_refused(2, "checksum mismatch", "--shards", str(damaged("corrupt", flip)))


# A hand-edited shard whose manifest was made to agree (its checksum set to
# what gnnrt computes): every value is still checked against its range, the
# first one out named with its file and row.
def out_of_range(d):
    f = d / "rank-1" / "graph_src.npy"
    a = np.load(f)
    a[3] = 1_000_000
    np.save(f, a)


edited = damaged("out_of_range", out_of_range)
_, out = train(2, "--shards", str(edited))
found = re.search(r"graph_src\.npy: checksum mismatch \(xxh64 ([0-9a-f]{16}), the manifest says ([0-9a-f]{16})\)", out)
if check(found is not None, f"out of range: no checksum mismatch first:\n{out[-2000:]}"):
    manifest = edited / "manifest.pbtxt"
    manifest.write_text(manifest.read_text().replace(f"xxh64: {int(found.group(2), 16)}", f"xxh64: {int(found.group(1), 16)}"))
    expect_refused(2, f"{edited}/rank-1/graph_src.npy: row 3 holds 1000000, outside [0, ", "--shards", str(edited))


def older_format(d):  # a folder written before the self-loop graph's ids ran in destination order
    f = d / "manifest.pbtxt"
    f.write_text(f.read_text().replace('format: "gnnrt-shards-2"', 'format: "gnnrt-shards-1"'))


expect_refused(2, "format 'gnnrt-shards-1' is not gnnrt-shards-2", "--shards",
               str(damaged("older", older_format)))

other = WORK / "other"
code, _ = run([GNNRT, "partition", "--parts", "2", "--method", "hdrf", "--out", str(other), "--dataset", DATASET])
check(code == 0, "partition hdrf")


def swap_rank(d):
    shutil.rmtree(d / "rank-1")
    shutil.copytree(other / "rank-1", d / "rank-1")


expect_refused(2, "belongs to another partition run", "--shards", str(damaged("mixed", swap_rank)))
expect_refused(2, "holds another dataset", "--shards", str(shards), "--set",
               "dataset.path=synthetic:nodes=250,classes=3,features=8,avg_degree=6,seed=5")
expect_refused(2, "written for another model", "--shards", str(shards), "--set", "model.layer[1].out=32")
expect_refused(2, "missing: the shards folder does not exist", "--shards", str(WORK / "nowhere"))

# Ranks started with different jobs (MPMD): the start-up fingerprint of the
# whole resolved job names each field and the ranks holding each value.
expect_refused(2, "model.layer[1].out is 16 on rank 0, 17 on rank 1",
               mpmd=[["--partition", "metis", "--set", "model.layer[1].out=16"],
                     ["--partition", "metis", "--set", "model.layer[1].out=17"]])
expect_refused(2, "seed is 4 on rank 0, 5 on rank 1",
               mpmd=[["--partition", "metis", "--set", "seed=4"], ["--partition", "metis", "--set", "seed=5"]])
if not QUICK:
    expect_refused(3, "optimizer.lr is 0.01 on ranks 0, 2, 0.02 on rank 1",
                   mpmd=[["--partition", "metis"], ["--partition", "metis", "--set", "optimizer.lr=0.02"],
                         ["--partition", "metis"]])
    # Fields a user rarely thinks of: the schedule, feature normalisation,
    # and a repeated field's length (a layer more on one rank).
    expect_refused(2, 'schedule.lr_schedule is CONSTANT on rank 0, COSINE on rank 1',
                   mpmd=[["--partition", "metis"], ["--partition", "metis", "--set", "schedule.lr_schedule=cosine"]])
    expect_refused(2, "dataset.normalize_features is false on rank 0, true on rank 1",
                   mpmd=[["--partition", "metis"],
                         ["--partition", "metis", "--set", "dataset.normalize_features=true"]])
    expect_refused(2, "model.layer.size is 5 on rank 0, 6 on rank 1",
                   mpmd=[["--partition", "metis"], ["--partition", "metis", "--set", "model.layer[5].type=relu"]])
    # Options outside the job (a device of another size on one rank): the
    # start-up comparison of the options (rank_options_test has every one).
    expect_refused(2, "--hbm-bytes is not given on rank 0, 1000000000 on rank 1",
                   mpmd=[["--partition", "metis"], ["--partition", "metis", "--hbm-bytes", "1000000000"]])

# A job meant for another rank count (partition.parts).
expect_refused(2, "the job is for 3 ranks (partition.parts) but runs on 2", "--partition", "metis",
               "--set", "partition.parts=3")


def expect_failed_everywhere(ranks, message, *extra, status=1, job=()):
    """A failure on rank 0 only (the ranks' writer) ends every rank with an error."""
    code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, "train", *job, *COMMON, *extra])
    expect_error_on_every_rank(code, out, ranks, message, status)
    return out


# Files only rank 0 writes: an unwritable --metrics (a folder) before the
# first step, an unwritable --params-out (a file) after the last.
expect_failed_everywhere(2, "cannot write --metrics", "--partition", "metis", "--metrics", str(WORK))
a_file = WORK / "a_file"
a_file.write_text("not a folder\n")
out = expect_failed_everywhere(2, "writing the outputs failed on rank 0", "--partition", "metis",
                               "--params-out", str(a_file / "params"))
check(re.search(r"epoch +2/2", out) is not None, "the run should have trained before failing")

# --debug on many ranks: a feature too large for the first layer makes Inf
# on the one rank holding that (isolated) vertex; the error names the rank,
# the op and its layer, and the job ends within the timeout although the
# other rank is waiting in a halo exchange.
try:
    import numpy as np
except ImportError:
    np = None
    check(False, "numpy is needed (scripts/setup.sh installs python3-numpy)")
# (Release only: the failing rank waits 10 s for its peers before it
# aborts the job, as every rank's error path does; QUICK runs the rest.)
if np is not None and not QUICK:
    data = WORK / "huge"
    data.mkdir(exist_ok=True)
    n = 60
    x = np.linspace(0, 1, n * 4, dtype=np.float32).reshape(n, 4)
    x[7, :] = 3e38
    ring = np.arange(n)
    others = ring[ring != 7]  # a ring through every vertex but 7
    nxt = np.roll(others, -1)
    np.save(data / "x.npy", x)
    np.save(data / "y.npy", (ring % 3).astype(np.int64))
    np.save(data / "edge_index.npy", np.stack([np.concatenate([others, nxt]),
                                              np.concatenate([nxt, others])]).astype(np.int64))
    np.save(data / "train_mask.npy", ring < 30)
    np.save(data / "val_mask.npy", (ring >= 30) & (ring < 45))
    np.save(data / "test_mask.npy", ring >= 45)
    started = __import__("time").monotonic()
    code, out = run([*MPIRUN, "-np", "2", GNNRT, "train", "--no-cache", "--debug", "--dataset", str(data),
                     "--partition", "random", "--set", "schedule.epochs=2"], timeout=90)
    errors = [line for line in out.splitlines() if "gnnrt: error:" in line]
    check(code == 1, f"--debug with Inf: exit {code}, expected 1\n{out[-3000:]}")
    # The first op to overflow names its layer: the input dropout (3e38
    # scaled by 1 / (1 - p) when row 7 keeps a value) or conv1's matmul.
    named = [line for line in errors if re.search(r"rank \d", line) and "produced Inf" in line
             and re.search(r"\((dropout0|conv1)\)", line)]
    check(len(named) == 1, "--debug on 2 ranks: not one error naming the rank, the op and the layer:\n" + out[-3000:])
    check(__import__("time").monotonic() - started < 60, "--debug with Inf took a minute or more")

# Degenerate inputs train or fail clearly, on one rank and on several.
if np is not None:
    def small_dataset(d, n=30, edges=None, poison=None):
        d.mkdir(parents=True, exist_ok=True)
        r = np.arange(n)
        x = np.linspace(-1, 1, n * 4, dtype=np.float32).reshape(n, 4)
        if poison is not None:
            x[poison[0], poison[1]] = poison[2]
        np.save(d / "x.npy", x)
        np.save(d / "y.npy", (r % 3).astype(np.int64))
        np.save(d / "edge_index.npy", np.zeros((2, 0), np.int64) if edges is None else edges)
        np.save(d / "train_mask.npy", r < 15)
        np.save(d / "val_mask.npy", (r >= 15) & (r < 22))
        np.save(d / "test_mask.npy", r >= 22)
        return d

    # A graph with no edges at all: every rank holds vertices and no edge.
    empty = small_dataset(WORK / "no_edges")
    got = {}
    for ranks in (1, 3):
        out_dir = WORK / f"no_edges_params_{ranks}"
        code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, "train", "--no-cache", "--dataset", str(empty),
                         "--partition", "metis", "--set", "schedule.epochs=5", "--params-out", str(out_dir)])
        check(code == 0, f"no edges on {ranks} rank(s): exit {code}\n{out[-2000:]}")
        got[ranks] = {p.name: np.load(p) for p in sorted(out_dir.glob("*.npy"))} if out_dir.exists() else {}
    check(got[1] and got[1].keys() == got[3].keys() and
          all(np.allclose(got[1][k], got[3][k], rtol=1e-5, atol=1e-6) for k in got[1]),
          "no edges: 3 ranks trained to other parameters than 1")
    # NaN or Inf in the features: refused before training on every rank,
    # naming the file, row and column.
    for value, text in ((np.nan, "row 2, column 1 is nan"), (-np.inf, "row 2, column 1 is -inf"))[:0 if QUICK else 2]:
        bad_x = small_dataset(WORK / f"poisoned_{text.split()[-1]}", poison=(2, 1, value))
        code, out = run([*MPIRUN, "-np", "2", GNNRT, "train", "--no-cache", "--dataset", str(bad_x),
                         "--partition", "random"])
        errors = [line for line in out.splitlines() if "gnnrt: error:" in line]
        check(code == 2 and len(errors) == 2 and all(f"x.npy: {text}" in e for e in errors)
              and re.search(r"epoch +1/", out) is None,
              f"features with {value}: exit {code}\n" + "\n".join(errors or [out[-2000:]]))
    # A loss that becomes non-finite in training (a learning rate of 1e30:
    # the weights overflow float32 within a few steps): every rank stops at
    # that epoch saying so, on one rank and on two.
    ring = np.arange(30)
    ringed = small_dataset(WORK / "ring", edges=np.stack([ring, np.roll(ring, 1)]).astype(np.int64))
    for ranks in () if QUICK else (1, 2):
        code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, "train", "--no-cache", "--dataset", str(ringed),
                         "--partition", "random", "--set", "optimizer.lr=1e30", "--set", "schedule.epochs=20"])
        errors = [line for line in out.splitlines() if "gnnrt: error:" in line]
        check(code == 1 and len(errors) == ranks and
              all(re.search(r"the loss became -?(nan|inf) at epoch \d+; rerun with --debug", e) for e in errors),
              f"a non-finite loss on {ranks} rank(s): exit {code}\n" + "\n".join(errors or [out[-2000:]]))

# The same job text, but the dataset's path reads other bytes on one rank
# (as on another host): each rank runs in its own folder holding its own
# "data" (one label differs). The datasets' identity stops both.
if np is not None and not QUICK:
    for host, label in (("hostA", 0), ("hostB", 1)):
        d = WORK / host / "data"
        d.mkdir(parents=True, exist_ok=True)
        n = 40
        ring = np.arange(n)
        np.save(d / "x.npy", np.linspace(0, 1, n * 4, dtype=np.float32).reshape(n, 4))
        y = (ring % 3).astype(np.int64)
        y[0] = label
        np.save(d / "y.npy", y)
        np.save(d / "edge_index.npy", np.stack([ring, np.roll(ring, 1)]).astype(np.int64))
        np.save(d / "train_mask.npy", ring < 20)
        np.save(d / "val_mask.npy", (ring >= 20) & (ring < 30))
        np.save(d / "test_mask.npy", ring >= 30)
    code, out = run([*MPIRUN, "-np", "1", "-wdir", str(WORK / "hostA"), GNNRT, "train", "--no-cache", "--dataset",
                     "npy:data", "--partition", "random", ":", "-np", "1", "-wdir", str(WORK / "hostB"), GNNRT,
                     "train", "--no-cache", "--dataset", "npy:data", "--partition", "random"])
    errors = [line for line in out.splitlines() if "gnnrt: error:" in line]
    check(code == 2 and len(errors) == 2 and all("the ranks would run different datasets" in e for e in errors)
          and re.search(r"epoch +1/", out) is None,
          f"one path, other bytes on rank 1: exit {code}\n" + "\n".join(errors or [out[-2000:]]))

# A silent corruption on one rank (GNNRT_FAULT=flip: a bit of a parameter)
# is caught by the parameter checksums at the first step and at the last,
# although checksum_every (50) is longer than the job.
for at, epochs, caught in ((1, 5, 1), (2, 2, 2), (3, 5, 5))[:1 if QUICK else 3]:
    code, out = run([*MPIRUN, "-np", "2", "-x", f"GNNRT_FAULT=flip:1:{at}", GNNRT, "train", *COMMON,
                     "--set", f"schedule.epochs={epochs}", "--partition", "metis"])
    errors = [line for line in out.splitlines() if "gnnrt: error:" in line]
    check(code == 1 and len(errors) == 2 and all(f"after step {caught}, the ranks' parameters diverged" in e
                                                 for e in errors),
          f"flip after step {at} of {epochs}: exit {code}, expected an error at step {caught}\n" +
          "\n".join(errors or [out[-2000:]]))
# Flipped before the first step, in the drawn parameters: rank 0's are
# broadcast, so the job trains to the very bits of an undisturbed run.
if np is not None and not QUICK:
    outs = {}
    for name, env in (("clean", []), ("flipped", ["-x", "GNNRT_FAULT=flip:1:0"])):
        code, out = run([*MPIRUN, "-np", "2", *env, GNNRT, "train", *COMMON, "--partition", "metis",
                         "--params-out", str(WORK / f"params_{name}")])
        check(code == 0, f"{name} initial parameters: exit {code}\n{out[-2000:]}")
        outs[name] = {p.name: np.load(p) for p in sorted((WORK / f"params_{name}").glob("*.npy"))}
    check(outs["clean"] and outs["clean"].keys() == outs["flipped"].keys() and
          all(np.array_equal(outs["clean"][k], outs["flipped"][k]) for k in outs["clean"]),
          "a rank whose drawn parameters differ trained to other parameters: rank 0's were not broadcast")

# Colour: under mpirun each rank's output is a pseudo-terminal of Open MPI's,
# whatever the user's is; log lines redirected to a file (here a pipe) carry
# no colour codes unless asked for.
bad = ["--set", "dataset.path=npy:/nonexistent"]
code, out = train(2, *bad)
check(code == 2 and "[error]" in out and "\x1b[" not in out,
      f"under mpirun, piped: exit {code}, colour codes: {chr(27) + '[' in out}\n{out[-1500:]!r}")
if not QUICK:
    code, out = run([*MPIRUN, "-np", "2", GNNRT, "--color", "always", "train", *COMMON, *bad])
    check(code == 2 and "\x1b[" in out, f"--color always under mpirun: no colour codes\n{out[-1500:]!r}")
    code, out = run([*MPIRUN, "-np", "2", "-x", "GNNRT_COLOR=always", GNNRT, "train", *COMMON, *bad])
    check(code == 2 and "\x1b[" in out, f"GNNRT_COLOR=always under mpirun: no colour codes\n{out[-1500:]!r}")
    # On a terminal of the user's own (one process, no mpirun): coloured.
    p = subprocess.run(["script", "-qec", " ".join([GNNRT, "train", *COMMON[:-2], *bad]), "/dev/null"],
                       capture_output=True, timeout=120)
    check(b"\x1b[" in p.stdout, f"on a terminal: no colour codes\n{p.stdout[-1500:]!r}")

finish()

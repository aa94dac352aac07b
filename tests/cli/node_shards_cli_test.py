#!/usr/bin/python3
"""Node shards for sampled training (docs/sampling.md, "Shards") end to end:
`gnnrt partition` on a sampled job writes each rank's owned nodes, in-edges
and features once; `mpirun -np N gnnrt train --shards DIR` has each rank
read only its own and trains to bitwise the parameters of the run that
made its shards in memory (the shards hold the same arrays):

1. The products-like graph at 2 and 3 ranks (contiguous ranges).
2. A NumPy dataset folder under METIS ownership, edges taken both ways; the
   dataset folder is moved away before training from the shards, so no
   rank read it.
3. Every way the shards can be wrong: an error on every rank (one
   `gnnrt: error:` line per rank, exit status 2), naming the file or field,
   before any step, nothing written: another rank count, a missing or
   corrupt array, a hand-edited array whose checksum was made to agree
   (its range checked), another dataset, another ownership, vertex-cut
   shards, a link job.

Usage: node_shards_cli_test.py GNNRT EXAMPLES_DIR MPIRUN... (run by ctest; WORK from $GNNRT_WORK)
"""
import os
import re
import shutil
import sys
from pathlib import Path

import numpy as np

from cli_common import check, damaged_copy, expect_error_on_every_rank, finish, run

GNNRT, EXAMPLES = sys.argv[1], Path(sys.argv[2])
MPIRUN = sys.argv[3:]
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_node_shards_cli"))
JOB = str(EXAMPLES / "products_sage.pbtxt")
GRAPH = "products:nodes=3000,edges=30000,features=12,classes=5"
SETS = ["--set", "model.layer[0].out=16", "--set", "model.layer[3].out=16", "--set", "sampling.batch_size=100",
        "--set", "schedule.epochs=1"]
SMALL = [*SETS, "--threads", "1", "--no-cache"]


def partition(parts, out, *extra):
    code, text = run([GNNRT, "partition", JOB, *SETS, *extra, "--parts", str(parts), "--out", str(out)])
    check(code == 0, f"gnnrt partition --parts {parts} {extra}: exit {code}\n{text[-2000:]}")
    return text


def train(ranks, params, *extra):
    code, text = run([*MPIRUN, "-np", str(ranks), GNNRT, "train", JOB, *SMALL, *extra, "--params-out", str(params)])
    check(code == 0, f"train -np {ranks} {extra}: exit {code}\n{text[-3000:]}")
    return text


def same_params(a, b, what):
    fa, fb = sorted(p.name for p in a.glob("*.npy")), sorted(p.name for p in b.glob("*.npy"))
    if not check(fa and fa == fb, f"{what}: parameter files {fa} and {fb}"):
        return
    for f in fa:
        check(np.array_equal(np.load(a / f), np.load(b / f)), f"{what}: {f} differs")


def expect_refused(ranks, message, *extra, job=JOB, small=SMALL):
    params = WORK / "refused_params"
    shutil.rmtree(params, ignore_errors=True)
    code, out = run([*MPIRUN, "-np", str(ranks), GNNRT, "train", job, *small, *extra, "--params-out", str(params)])
    expect_error_on_every_rank(code, out, ranks, message, 2)
    check(re.search(r"epoch +1/", out) is None, f"{message!r}: a step ran before the error")
    check(not params.exists(), f"{message!r}: parameters were written")
    return out


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)
PRODUCTS = ["--set", f"dataset.path={GRAPH}"]
LINK_SMALL = ["--set", "sampling.batch_size=100", "--set", "schedule.epochs=1", "--threads", "1", "--no-cache"]

# 1. The products-like graph: shards equal the in-memory ones, bitwise.
for ranks in (2, 3):
    shards = WORK / f"products{ranks}"
    text = partition(ranks, shards, *PRODUCTS)
    check("owned nodes" in text and "in-edges" in text, f"gnnrt partition prints no per-rank table:\n{text}")
    manifest = (shards / "manifest.pbtxt").read_text()
    check('format: "gnnrt-node-shards-1"' in manifest and 'method: "ranges"' in manifest, "the manifest's format")
    for r in range(ranks):
        for array in ("indptr", "indices", "x", "y"):
            check((shards / f"rank-{r}" / f"{array}.npy").exists(), f"rank-{r}/{array}.npy missing")
    owned = [np.load(shards / f"rank-{r}" / "indptr.npy").size - 1 for r in range(ranks)]
    check(owned == [3000 * (r + 1) // ranks - 3000 * r // ranks for r in range(ranks)], f"owned nodes {owned}")
    train(ranks, WORK / f"memory{ranks}", *PRODUCTS)
    log = train(ranks, WORK / f"from_shards{ranks}", *PRODUCTS, "--shards", str(shards))
    check(f"read node shards of {ranks} ranks" in log, f"np {ranks}: the log does not say the shards were read")
    same_params(WORK / f"memory{ranks}", WORK / f"from_shards{ranks}", f"products np {ranks}")

# 2. A NumPy dataset folder, METIS ownership, edges both ways.
data = WORK / "numpy_data"
data.mkdir()
rng = np.random.default_rng(3)
n = 400
x = rng.standard_normal((n, 12)).astype(np.float32)
y = rng.integers(0, 5, n)
src, dst = rng.integers(0, n, 2400), rng.integers(0, n, 2400)
np.save(data / "x.npy", x)
np.save(data / "y.npy", y)
np.save(data / "edge_index.npy", np.stack([src, dst]))
split = rng.integers(0, 3, n)
for k, name in enumerate(("train", "val", "test")):
    np.save(data / f"{name}_mask.npy", split == k)
METIS = ["--set", f"dataset.path={data}", "--set", "sampling.ownership=METIS", "--set", "sampling.undirected=true"]
metis_shards = WORK / "metis2"
partition(2, metis_shards, *METIS)
check('method: "metis"' in (metis_shards / "manifest.pbtxt").read_text(), "METIS shards: the manifest's method")
owner = np.load(metis_shards / "common" / "owner.npy")
check(owner.shape == (n,) and set(owner.tolist()) == {0, 1}, "METIS shards: the owner table")
check(all(np.array_equal(np.load(metis_shards / f"rank-{r}" / "owned_nodes.npy"), np.flatnonzero(owner == r))
          for r in (0, 1)), "METIS shards: owned_nodes is not the owner table's")
train(2, WORK / "metis_memory", *METIS)
moved = WORK / "numpy_data_moved"
data.rename(moved)  # the job's dataset.path no longer exists: only the shards can be read
train(2, WORK / "metis_from_shards", *METIS, "--shards", str(metis_shards))
same_params(WORK / "metis_memory", WORK / "metis_from_shards", "METIS np 2")
moved.rename(data)

# 3. Wrong shards, refused on every rank by name.
shards = WORK / "products2"
expect_refused(3, "holds shards for 2 ranks, but the job runs on 3", *PRODUCTS, "--shards", str(shards))
expect_refused(2, "holds another dataset", "--set", "dataset.path=products:nodes=3001,edges=30000,features=12,classes=5",
               "--shards", str(shards))
expect_refused(2, "owns nodes by metis, the job's sampling.ownership on 2 ranks by ranges", "--set",
               f"dataset.path={data}", "--set", "sampling.undirected=true", "--shards", str(metis_shards))
expect_refused(2, "was written with sampling.undirected = true, the job has false", "--set", f"dataset.path={data}",
               "--set", "sampling.ownership=METIS", "--shards", str(metis_shards))


def damaged(name, damage):
    return damaged_copy(shards, WORK / name, damage)


expect_refused(2, "rank-1/indices.npy: missing", *PRODUCTS, "--shards",
               str(damaged("missing", lambda d: (d / "rank-1" / "indices.npy").unlink())))


def flip(d):
    f = d / "rank-1" / "x.npy"
    b = bytearray(f.read_bytes())
    b[-5] ^= 0x20
    f.write_bytes(bytes(b))


out = expect_refused(2, "rank-1/x.npy: checksum mismatch", *PRODUCTS, "--shards", str(damaged("corrupt", flip)))
check("loading the graph failed on rank 1" in out, f"rank 0 is not told which rank failed:\n{out[-2000:]}")


def out_of_range(d):
    f = d / "rank-0" / "indices.npy"
    a = np.load(f)
    a[7] = 3000
    np.save(f, a)


# A hand-edited array whose checksum in the manifest was made to agree: its
# values are still checked, the first one out named with its file and row.
edited = damaged("out_of_range", out_of_range)
out = expect_refused(2, "rank-0/indices.npy: checksum mismatch", *PRODUCTS, "--shards", str(edited))
found = re.search(r"indices\.npy: checksum mismatch \(xxh64 ([0-9a-f]{16}), the manifest says ([0-9a-f]{16})\)", out)
if check(found is not None, f"out of range: no checksum mismatch first:\n{out[-2000:]}"):
    manifest = edited / "manifest.pbtxt"
    manifest.write_text(manifest.read_text().replace(f"xxh64: {int(found.group(2), 16)}",
                                                     f"xxh64: {int(found.group(1), 16)}"))
    expect_refused(2, "rank-0/indices.npy: row 7 holds 3000: node", *PRODUCTS, "--shards", str(edited))

# Vertex-cut shards (full-graph training's) are not node shards.
vertex_cut = WORK / "vertex_cut"
code, text = run([GNNRT, "partition", "--parts", "2", "--out", str(vertex_cut), "--dataset",
                  "synthetic:nodes=100,classes=3,features=4,avg_degree=4"])
check(code == 0, f"vertex-cut partition: exit {code}\n{text[-1000:]}")
expect_refused(2, "holds vertex-cut shards for full-graph training (gnnrt-shards-2), this job reads node shards",
               *PRODUCTS, "--shards", str(vertex_cut))
# gnnrt partition on a sampled job: ownership is the job's (no --method or
# --seed), and a link job has no node shards; nothing written.
for extra, message in ((["--method", "metis"], "gnnrt partition --method: a sampled job's nodes are owned as its "
                                               "sampling.ownership says"),
                       (["--seed", "3"], "gnnrt partition --seed"),
                       (["--set", "link.val_fraction=0.1"], "gnnrt partition on a link job")):
    out_dir = WORK / "refused_partition"
    code, text = run([GNNRT, "partition", JOB, *SETS, *PRODUCTS, *extra, "--parts", "2", "--out", str(out_dir)])
    check(code == 2 and message in text, f"partition {extra}: exit {code}, expected 2 naming {message!r}:\n{text[-800:]}")
    check(not out_dir.exists(), f"partition {extra}: a folder was written")
# A link job splits the whole edge list: no shards.
expect_refused(2, "a link job splits the whole edge list on every rank, so it reads no shards", *PRODUCTS,
               "--set", "sampling.fanout=5,5", "--shards", str(shards), job=str(EXAMPLES / "cora_link.pbtxt"),
               small=LINK_SMALL)

finish()

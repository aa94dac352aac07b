#!/usr/bin/python3
"""The checks of multihost_test.sh, run with two simulated hosts up (h1 at
198.18.0.1 runs the launcher, h2 at 198.18.0.2). Usage: multihost_checks.py GNNRT"""
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

from launch_common import check, events, failures, iso, job_processes, params

GNNRT = sys.argv[1]
TAG = os.environ["NETNS_TAG"]
AGENT = os.environ["GNNRT_NETNS_AGENT"]
WORK = Path(os.environ.get("GNNRT_WORK", "/tmp/gnnrt_multihost_test"))
DATASET = "synthetic:nodes=600,classes=4,features=16,avg_degree=6,seed=3"
TRAIN = ["train", "--no-cache", "--dataset", DATASET, "--threads", "1"]
HOSTS = "198.18.0.1:2,198.18.0.2:2"
# Open MPI starts h2's daemon through the agent; its TCP stays on the test subnet.
MPI = [f"--mpirun-arg={a}" for a in ("--mca", "plm_rsh_agent", AGENT, "--mca", "oob_tcp_if_include",
                                     "198.18.0.0/24", "--mca", "btl_tcp_if_include", "198.18.0.0/24")]
figures = {}


def on_host(i, argv):
    return ["ip", "netns", "exec", f"{TAG}h{i}", "unshare", "--uts", "sh", "-c", f'hostname h{i} && exec "$@"',
            "sh", *argv]


def namespace_pids(i):
    out = subprocess.run(["ip", "netns", "pids", f"{TAG}h{i}"], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def no_leftovers(name, run_dir, wait=20):
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and (job_processes(run_dir) or namespace_pids(2)):
        time.sleep(0.25)
    check(not job_processes(run_dir), f"{name}: processes of the job survive: {job_processes(run_dir)}")
    check(not namespace_pids(2), f"{name}: processes left on h2: {namespace_pids(2)}")


shutil.rmtree(WORK, ignore_errors=True)
WORK.mkdir(parents=True)

def same_keys(a, b, what):
    """Both runs wrote parameters, and the same names: comparing two empty
    folders proves nothing."""
    return check(a and b and set(a) == set(b), f"{what}: parameter names {sorted(a)} and {sorted(b)}")


# ---- 2 hosts, 4 ranks: the single-host result ----
epochs = ["--set", "schedule.epochs=12"]
one = subprocess.run([GNNRT, *TRAIN, *epochs, "--params-out", str(WORK / "one")], capture_output=True, text=True)
check(one.returncode == 0, f"single rank: {one.stderr[-2000:]}")
run = WORK / "two_hosts"
p = subprocess.run(on_host(1, [GNNRT, "launch", "-n", "4", "--hosts", HOSTS, *MPI, "--run-dir", str(run), "--",
                               *TRAIN, *epochs, "--params-out", str(WORK / "two_hosts_params")]),
                   capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"two hosts: exit {p.returncode}\n{(p.stdout + p.stderr)[-4000:]}")
# The control server listens where h2 can reach it (the route to h2), not
# on h1's first interface (the decoy 198.19.0.1).
where = json.loads((run / "control.json").read_text()) if (run / "control.json").exists() else {}
check(where.get("address") == "198.18.0.1", f"two hosts: the control server listened on {where.get('address')}, "
                                            "not on 198.18.0.1 (the interface that routes to h2)")
a = params(WORK / "one") if (WORK / "one").exists() else {}
b = params(WORK / "two_hosts_params") if (WORK / "two_hosts_params").exists() else {}
if same_keys(a, b, "two hosts"):
    worst = max(float(np.max(np.abs(a[k] - b[k]) / (np.abs(a[k]) + 1e-6))) for k in a)
    check(all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a),
          f"two hosts: parameters differ from one rank (worst relative {worst:.2e})")
    print(f"two hosts vs one rank: worst relative difference {worst:.2e}")
    for k, host in ((0, "h1"), (1, "h1"), (2, "h2"), (3, "h2")):
        lines = (run / "logs" / f"rank-{k}.log").read_text().splitlines()
        check(lines and all(f"[rank {k} host {host}]" in line for line in lines), f"two hosts: rank-{k}.log not on {host}")
no_leftovers("two hosts", run)

# ---- bench collectives across the hosts (TCP) ----
run = WORK / "bench"
p = subprocess.run(on_host(1, [GNNRT, "launch", "-n", "2", "--hosts", "198.18.0.1:1,198.18.0.2:1", *MPI,
                               "--control-address", "198.18.0.1",
                               "--run-dir", str(run), "--", "bench", "collectives", "--op", "allreduce",
                               "--algorithm", "native", "--min-bytes", "8", "--max-bytes", "16777216",
                               "--seconds", "0.2", "--json", str(WORK / "bench.json")]),
                   capture_output=True, text=True, timeout=300)
check(p.returncode == 0 and "allreduce" in p.stdout, f"bench: exit {p.returncode}\n{(p.stdout + p.stderr)[-3000:]}")
if (WORK / "bench.json").exists():
    rows = json.loads((WORK / "bench.json").read_text())
    rows = rows.get("rows", rows) if isinstance(rows, dict) else rows
    for r in rows:
        if r.get("bytes") in (8, 16777216):
            figures[f"tcp_allreduce_{r['bytes']}B"] = {"avg_us": r["avg_us"], "busbw_GBps": r["busbw"]}
    print("across namespaces:", json.dumps(figures))
where = json.loads((run / "control.json").read_text()) if (run / "control.json").exists() else {}
check(where.get("address") == "198.18.0.1", f"bench: --control-address 198.18.0.1, but it listened on {where}")
no_leftovers("bench", run)
# An address this host does not have: one clear line, exit 2.
p = subprocess.run(on_host(1, [GNNRT, "launch", "-n", "2", "--hosts", "198.18.0.1:1,198.18.0.2:1", *MPI,
                               "--control-address", "198.18.0.77", "--run-dir", str(WORK / "bad_address"), "--",
                               "bench", "collectives", "--max-bytes", "8"]), capture_output=True, text=True, timeout=60)
check(p.returncode == 2 and "cannot listen on 198.18.0.77 (--control-address)" in p.stderr,
      f"bad --control-address: exit {p.returncode}\n{p.stderr[-1000:]}")

# ---- h2's link cut mid-run: detected, restarted on h1 alone (--min-ranks 2) ----
run = WORK / "cut"
long = ["--set", "schedule.epochs=600"]
launcher = subprocess.Popen(on_host(1, [GNNRT, "launch", "-n", "4", "--hosts", HOSTS, *MPI, "--run-dir", str(run),
                                        "--min-ranks", "2", "--max-restarts", "1", "--heartbeat-timeout", "3",
                                        "--grace", "2", "--", *TRAIN, *long, "--params-out",
                                        str(WORK / "cut_params")]),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
deadline = time.monotonic() + 120
while time.monotonic() < deadline:
    m = run / "metrics.jsonl"
    if m.exists() and len(m.read_text().splitlines()) >= 20:
        break
    time.sleep(0.1)
cut_at = time.time()
subprocess.run(["ip", "-n", f"{TAG}h2", "link", "set", f"{TAG}b2", "down"], check=True)
out, _ = launcher.communicate(timeout=300)
check(launcher.returncode == 0, f"cut: exit {launcher.returncode}\n{out[-4000:]}")
ev = events(run)
kinds = [e["event"] for e in ev if e["event"] != "notice"]  # notices: checked where they matter
check(kinds[:2] == ["start", "failure"] and "host_lost" in kinds and "restart" in kinds and kinds[-1] == "finish",
      f"cut: events {kinds}")
restart = next((e for e in ev if e["event"] == "restart"), {})
check(restart.get("ranks") == 2, f"cut: restarted on {restart.get('ranks')} ranks, expected 2")
fail = next((e for e in ev if e["event"] == "failure"), None)
if fail:
    t = iso(fail["detected"])
    figures["cut_detect_s"] = round(t - cut_at, 3)
training = next((e for e in ev if e["event"] == "training"), None)
if fail and training:
    t1 = iso(training["at"])
    figures["cut_training_again_s"] = round(t1 - t, 3)
ref = subprocess.run([GNNRT, *TRAIN, *long, "--params-out", str(WORK / "cut_ref")], capture_output=True, text=True)
check(ref.returncode == 0, f"cut: the reference run failed (exit {ref.returncode}): {ref.stderr[-2000:]}")
a = params(WORK / "cut_ref") if (WORK / "cut_ref").exists() else {}
b = params(WORK / "cut_params") if (WORK / "cut_params").exists() else {}
if same_keys(a, b, "cut"):
    check(all(np.allclose(a[k], b[k], rtol=1e-5, atol=1e-6) for k in a),
          "cut: the result after the restart on fewer ranks differs from an uninterrupted run beyond rtol 1e-5")
# Nothing of the job may be left on either side while h2 is still cut off
# (its daemon and ranks must end by themselves: keepalive, lost launcher).
no_leftovers("cut", run, wait=30)
subprocess.run(["ip", "-n", f"{TAG}h2", "link", "set", f"{TAG}b2", "up"], check=True)

# ---- a rank on h2 killed: restarted on both hosts, bitwise the uninterrupted 2-host run ----
run = WORK / "remote_kill"
p = subprocess.run(on_host(1, [GNNRT, "launch", "-n", "4", "--hosts", HOSTS, *MPI, "--run-dir", str(run),
                               "--inject-fault", "kill:3:5", "--max-restarts", "1", "--", *TRAIN, *epochs,
                               "--params-out", str(WORK / "remote_kill_params")]),
                   capture_output=True, text=True, timeout=300)
check(p.returncode == 0, f"remote kill: exit {p.returncode}\n{(p.stdout + p.stderr)[-4000:]}")
ev = events(run)
fail = next((e for e in ev if e["event"] == "failure"), {})
check(fail.get("rank") == 3 and fail.get("host") == "h2", f"remote kill: failure record {fail}")
a = params(WORK / "two_hosts_params") if (WORK / "two_hosts_params").exists() else {}
b = params(WORK / "remote_kill_params") if (WORK / "remote_kill_params").exists() else {}
if same_keys(a, b, "remote kill"):
    check(all(np.array_equal(a[k], b[k]) for k in a),
          "remote kill: parameters after the restart differ from the uninterrupted 2-host run")
no_leftovers("remote kill", run)

print("figures:", json.dumps(figures))
if failures:
    print(f"{len(failures)} failure(s)")
    sys.exit(1)
print("all multi-host checks passed")

#!/usr/bin/python3
"""How fast `gnnrt launch` notices each kind of failure and trains again.
Each kind is injected ROUNDS times (--inject-fault) into a 4-rank job on
this host; detection = the failure's `detected` time in events.jsonl minus
the time of the rank's "fault injection" log line; training again = the
first epoch after the restart (`training` event) minus detection. Prints a
table of medians; JSON in build/bench/launcher/faults.json.
  /usr/bin/python3 bench/launcher_faults.py [--gnnrt build/launch/gnnrt] [--rounds 5]"""
import argparse
import json
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument("--gnnrt", default="build/launch/gnnrt")
ap.add_argument("--rounds", type=int, default=5)
ap.add_argument("--out", default="build/bench/launcher")
args = ap.parse_args()
out = Path(args.out)
out.mkdir(parents=True, exist_ok=True)
TRAIN = ["train", "--no-cache", "--dataset", "synthetic:nodes=600,classes=4,features=16,avg_degree=6,seed=3",
         "--set", "schedule.epochs=12", "--threads", "1"]
KINDS = {  # kind: launcher flags
    "kill": ["--heartbeat-timeout", "3", "--progress-timeout", "3"],
    "exit": ["--heartbeat-timeout", "3", "--progress-timeout", "3"],
    "silent": ["--heartbeat-timeout", "3", "--progress-timeout", "30"],
    "hang": ["--heartbeat-timeout", "30", "--progress-timeout", "3"],
}


def seconds(stamp, iso):
    t = time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S" if iso else "%Y-%m-%d %H:%M:%S")
    return time.mktime(t) + float("0" + stamp[19:23])


env = dict(os.environ, OMPI_MCA_mpi_yield_when_idle="1")
results = {k: {"detect_s": [], "training_again_s": []} for k in KINDS}
for r in range(args.rounds):
    for kind, flags in KINDS.items():
        run = out / f"{kind}-{r}"
        shutil.rmtree(run, ignore_errors=True)
        rank = 1 + r % 3
        p = subprocess.run([args.gnnrt, "launch", "-n", "4", "--run-dir", str(run), "--max-restarts", "1",
                            "--inject-fault", f"{kind}:{rank}:4", *flags, "--", *TRAIN],
                           capture_output=True, text=True, env=env, timeout=300)
        events = [json.loads(line) for line in (run / "events.jsonl").read_text().splitlines()]
        fail = next(e for e in events if e["event"] == "failure")
        fault = next(line for line in (run / "logs" / f"rank-{rank}.log").read_text().splitlines()
                     if "fault injection" in line)
        detected = seconds(fail["detected"], True)
        results[kind]["detect_s"].append(detected - seconds(fault, False))
        training = next((e for e in events if e["event"] == "training"), None)
        if training:
            results[kind]["training_again_s"].append(seconds(training["at"], True) - detected)
        if p.returncode != 0:
            print(f"{kind} round {r}: exit {p.returncode}")

print(f"{'failure':<10}{'timeout':>10}{'detected after (s)':>22}{'training again after (s)':>28}   rounds {args.rounds}")
summary = {}
for kind, v in results.items():
    flags = KINDS[kind]
    timeout = {"silent": flags[1], "hang": flags[3]}.get(kind, "-")
    d = statistics.median(v["detect_s"])
    t = statistics.median(v["training_again_s"]) if v["training_again_s"] else float("nan")
    summary[kind] = {"detect_s_median": d, "training_again_s_median": t, **v}
    print(f"{kind:<10}{timeout:>10}{d:>22.3f}{t:>28.3f}")
(out / "faults.json").write_text(json.dumps(summary, indent=1) + "\n")
print(f"JSON: {out / 'faults.json'}")

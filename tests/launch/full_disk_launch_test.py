#!/usr/bin/python3
"""A run directory whose disk fills up while `gnnrt launch` trains: a small
tmpfs (in a mount namespace of this test's own, so nothing outlives it)
fills while the job writes a checkpoint, a metrics record and the
launcher's events. Afterwards events.jsonl and metrics.jsonl hold whole
records only (every line parses as JSON), no temporary file is left, and
the launcher's final record is in events.jsonl or its absence is said on
the console. With space again, a torn tail left in events.jsonl (a machine
that stopped mid-record) is cut back with a warning, and a new launch
resumes to the end, every epoch's metrics record once.

Before: a torn restart record ran into the next one without a newline, the
failure and finish records were missing without a word, and an empty
metrics.jsonl.tmp was left.

Root only (mount); exit 77 (skipped) elsewhere, never under CI=true.
Usage: full_disk_launch_test.py GNNRT
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

GNNRT = os.path.abspath(sys.argv[1])
PAGE = os.sysconf("SC_PAGE_SIZE")

if os.environ.get("GNNRT_TEST_MOUNT_NS") != "1":
    if os.getuid() != 0 or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode != 0:
        if os.environ.get("CI") == "true":
            print("FAILED: a tmpfs cannot be mounted here (root and unshare needed), and CI must run this test")
            sys.exit(1)
        print("SKIPPED: a tmpfs cannot be mounted here (root and unshare needed)")
        sys.exit(77)
    os.environ["GNNRT_TEST_MOUNT_NS"] = "1"
    os.execvp("unshare", ["unshare", "-m", sys.executable, os.path.abspath(__file__), *sys.argv[1:]])

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from launch_common import check, failures  # noqa: E402 (after the re-exec above)


def records(path, what):
    """The file's records; every line must parse as a JSON object."""
    out = []
    for k, line in enumerate(path.read_text().splitlines() if path.exists() else []):
        try:
            out.append(json.loads(line))
        except ValueError:
            check(False, f"{what}: line {k + 1} of {path.name} is not a whole record: {line[:200]!r}")
    return out


def temporary_files(folder):
    return [str(p) for p in folder.rglob("*") if ".tmp" in p.name]


disk = Path(tempfile.mkdtemp())
subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "tmpfs", str(disk)], check=True)
try:
    run = disk / "run"
    command = [GNNRT, "launch", "-n", "2", "--run-dir", str(run), "--max-restarts", "2", "--", "train",
               "--no-cache", "--threads", "1", "--set", "schedule.epochs=3000"]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len(records(run / "metrics.jsonl", "before")) < 5:
        time.sleep(0.02)
    # The next event record cannot fit its page: 20 bytes are left of it.
    events = run / "events.jsonl"
    pad = (PAGE - 20 - events.stat().st_size % PAGE) % PAGE
    pad += PAGE if pad < 40 else 0
    with open(events, "a") as f:
        f.write('{"event":"padding","x":"' + "x" * (pad - 27) + '"}\n')
    check(events.stat().st_size % PAGE == PAGE - 20, "the padding record did not leave 20 bytes of the page")
    # Then the disk fills, and stays full: what a failed write frees (a
    # checkpoint's temporary file) is taken again at once.
    stop = threading.Event()

    def fill():
        fd = os.open(disk / "filler", os.O_WRONLY | os.O_CREAT)
        while not stop.is_set():
            try:
                os.write(fd, b"\0" * PAGE)
            except OSError:
                time.sleep(0.0002)
        os.close(fd)

    filler = threading.Thread(target=fill)
    filler.start()
    try:
        out, _ = job.communicate(timeout=240)
    finally:
        stop.set()
        filler.join()
    print(out[-3000:])
    check(job.returncode == 1, f"full disk: exit {job.returncode}, expected 1")
    full_events = records(events, "full disk")
    records(run / "metrics.jsonl", "full disk")
    check(not temporary_files(run), f"full disk: temporary files left: {temporary_files(run)}")
    kinds = [e["event"] for e in full_events]
    check("finish" in kinds or "the finish record is not in events.jsonl" in out,
          f"full disk: no finish record and no word of it on the console: {kinds}")
    check("failure" in kinds or "the failure record is not in events.jsonl" in out,
          f"full disk: no failure record and no word of it on the console: {kinds}")
    print("full disk: events", kinds)

    # Space again, and a torn tail in events.jsonl (a machine that stopped).
    (disk / "filler").unlink()
    with open(events, "a") as f:
        f.write('{"event": "restart", "attem')
    again = subprocess.run(command, capture_output=True, text=True, timeout=300)
    out = again.stdout + again.stderr
    check(again.returncode == 0, f"resume: exit {again.returncode}\n{out[-3000:]}")
    check("cut back a torn last record" in out, f"resume: no word of the torn record cut back:\n{out[-2000:]}")
    final = records(events, "resume")
    check(final and final[-1]["event"] == "finish", f"resume: the last record is not the finish: {final[-1:]}")
    epochs = [m["epoch"] for m in records(run / "metrics.jsonl", "resume") if "epoch" in m]
    check(epochs == list(range(1, 3001)), f"resume: metrics epochs are not 1..3000 once each "
                                          f"({len(epochs)} records, first {epochs[:3]}, last {epochs[-3:]})")
    check(not temporary_files(run), f"resume: temporary files left: {temporary_files(run)}")
finally:
    subprocess.run(["umount", "-l", str(disk)])
    os.rmdir(disk)

if failures:
    print(f"{len(failures)} check(s) failed")
    sys.exit(1)
print("full disk under the launcher: whole records only, nothing left behind, the resume complete")

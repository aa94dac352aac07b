"""Helpers shared by the launcher's tests (launch_test.py, kill_trials.py,
multihost_checks.py, ../cli/batch_cli_test.py): failures collected by
check(), the live processes of a run directory and its ranks' pids, and its
events, parameters and timestamps, its network namespace and its listening
sockets."""
import ctypes
import ipaddress
import json
import os
import time
from pathlib import Path

import numpy as np

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what, flush=True)
    return ok


def job_processes(run_dir):
    """Pids of live processes started for this run directory (their
    environment names its log folder)."""
    marker = f"GNNRT_LOG_DIR={run_dir}/logs".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            env = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().split(")")[-1].split()[0]
        except OSError:
            continue
        if marker in env.split(b"\0") and state != "Z":
            pids.append(int(entry.name))
    return pids


def rank_pids(run_dir):
    """rank -> pid of the current attempt, from the launcher's log."""
    pids = {}
    log = Path(run_dir) / "logs" / "launcher.log"
    for line in log.read_text().splitlines() if log.exists() else []:
        if "] rank " in line and " registered: host " in line:
            pids[int(line.split("] rank ")[1].split()[0])] = int(line.rsplit("pid ", 1)[1])
    return pids


def events(run_dir):
    return [json.loads(line) for line in (Path(run_dir) / "events.jsonl").read_text().splitlines()]


def params(folder):
    return {p.name: np.load(p) for p in sorted(Path(folder).glob("*.npy"))}


def iso(t):
    """Seconds since the epoch of an events.jsonl time (ISO, milliseconds)."""
    return time.mktime(time.strptime(t[:19], "%Y-%m-%dT%H:%M:%S")) + float("0" + t[19:23])


CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd):
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


def enter_launcher_network(run_dir):
    """Moves this thread into the launcher's network namespace (control.json
    names it when the launcher made one), where its control server's
    127.0.0.1 is; returns (control address, a handle for leave_network)."""
    where = json.loads((Path(run_dir) / "control.json").read_text())
    home = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    if where.get("network_namespace"):
        fd = os.open(where["network_namespace"], os.O_RDONLY)
        try:
            _setns(fd)
        finally:
            os.close(fd)
    return (where["address"], where["port"]), home


def leave_network(home):
    _setns(home)
    os.close(home)


def _listening(pid):
    """(address, port, socket inode) of every TCP listener in pid's network namespace."""
    found = []
    for table, family in (("tcp", 4), ("tcp6", 6)):
        try:
            lines = Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            f = line.split()
            if f[3] != "0A":  # LISTEN
                continue
            hexaddr, port = f[1].split(":")
            raw = bytes.fromhex(hexaddr)
            if family == 4:
                address = ipaddress.IPv4Address(raw[::-1])
            else:  # four little-endian 32-bit words
                address = ipaddress.IPv6Address(b"".join(raw[i:i + 4][::-1] for i in range(0, 16, 4)))
            found.append((address, int(port, 16), f[9]))
    return found


def job_listeners(pids):
    """Each listening TCP socket the processes hold: (pid, address, port,
    whether its network namespace has an interface other than loopback)."""
    out = []
    for pid in pids:
        try:
            inodes = {os.readlink(f"/proc/{pid}/fd/{fd}")[8:-1] for fd in os.listdir(f"/proc/{pid}/fd")
                      if os.readlink(f"/proc/{pid}/fd/{fd}").startswith("socket:[")}
            interfaces = [line.split(":")[0].strip() for line in Path(f"/proc/{pid}/net/dev").read_text().splitlines()[2:]]
        except OSError:
            continue
        reachable = any(name != "lo" for name in interfaces)
        for address, port, inode in _listening(pid):
            if inode in inodes:
                out.append((pid, address, port, reachable))
    return out

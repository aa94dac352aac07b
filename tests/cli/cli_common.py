"""What the CLI tests share: checks that collect their failures, a command's
exit status and output, an error that must reach every rank, and a damaged
copy of a folder. Imported from the test scripts beside it (their folder is
first on sys.path)."""
import shutil
import subprocess
import sys

failures = []


def check(ok, what):
    if not ok:
        failures.append(what)
        print("FAILED:", what)
    return ok


def run(args, timeout=120):
    """The command's exit status and its stdout and stderr together."""
    p = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout + p.stderr


def expect_error_on_every_rank(code, out, ranks, message, status):
    """Exit `status`, one `gnnrt: error:` line per rank, one of them naming `message`."""
    errors = [line for line in out.splitlines() if "gnnrt: error:" in line]
    check(code == status, f"{message!r}: exit {code}, expected {status}\n{out[-3000:]}")
    check(len(errors) == ranks, f"{message!r}: {len(errors)} error lines for {ranks} ranks:\n" + "\n".join(errors))
    check(any(message in line for line in errors), f"no error says {message!r}:\n" + "\n".join(errors))


def damaged_copy(source, copy, damage):
    """A fresh copy of the folder `source` at `copy`, then damage(copy)."""
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(source, copy)
    damage(copy)
    return copy


def finish():
    print(f"{len(failures)} failure(s)")
    sys.exit(1 if failures else 0)

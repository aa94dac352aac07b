#!/usr/bin/python3
"""Every Python script the project ships, and every command its README and
docs tell a user to run, uses Debian's interpreter (/usr/bin/python3, the one
CMake pins, which has python3-numpy), never the first python3 on PATH: a
shebang of '#!/usr/bin/env python3' or a bare 'python3 ...' in a shell script
or a documented command would pick up another Python on the machines that put
one first (scripts/demo.sh once failed that way).

Usage: python_pin_test.py SOURCE_DIR
"""
import re
import sys
from pathlib import Path

root = Path(sys.argv[1])
# A command word 'python3' (not /usr/bin/python3, not a package name such as
# python3-numpy).
bare = re.compile(r"(^|[\s;&|(`$])python3(\s|$)")
# The demo's test runs the PATH's python3 on purpose: to show it lacks numpy.
exempt = {Path("tests/cli/demo_test.sh")}
problems = []

for path in sorted(root.rglob("*.py")):
    rel = path.relative_to(root)
    if rel.parts[0].startswith("build"):
        continue
    first = path.read_text(errors="replace").split("\n", 1)[0]
    if first.startswith("#!") and first != "#!/usr/bin/python3":
        problems.append(f"{rel}:1: shebang {first!r}, expected '#!/usr/bin/python3'")

for path in sorted(root.rglob("*.sh")):
    rel = path.relative_to(root)
    if rel.parts[0].startswith("build") or rel in exempt:
        continue
    packages = False  # inside a `packages=( ... )` list of Debian package names
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        code = line.split("#", 1)[0] if not line.lstrip().startswith("#!") else ""
        packages = packages or code.lstrip().startswith("packages=(")
        if packages:
            packages = ")" not in code
            continue
        if bare.search(code):
            problems.append(f"{rel}:{n}: runs the PATH's python3: {line.strip()}")

docs = [root / "README.md", root / "bench" / "README.md", *sorted((root / "docs").glob("*.md"))]
for path in docs:
    rel = path.relative_to(root)
    fenced = False
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        # Commands live in fenced blocks and in blocks indented by 4 spaces.
        if (fenced or line.startswith("    ")) and bare.search(line):
            problems.append(f"{rel}:{n}: a documented command runs the PATH's python3: {line.strip()}")

for p in problems:
    print("FAILED:", p)
print(f"{len(problems)} problem(s)" if problems else "every script and documented command uses /usr/bin/python3")
sys.exit(1 if problems else 0)

#!/usr/bin/env python3
"""Fails when a document or a comment names a repository path that does not exist.

    scripts/check_paths.py [ROOT]        (ctest: docs_paths)

Looks at README.md, docs/**/*.md and the source files (include/, tests/, pmpi/,
python/, tools/, benchmarks/, examples/, scripts/, cmake/, CMakeLists.txt, .ci/)
for two kinds of reference:
  - a path that starts at a top-level folder of the repository (`include/...`,
    `tests/...`, `scripts/...`, ...) or at `mdring/` (a header as it is included:
    include/mdring/...); a path with a wildcard, a placeholder (<...>, $VAR, {...})
    or inside a build tree is not a reference to check;
  - in Markdown, a relative link target ([text](path)), resolved against the
    document's folder (anchors and web addresses are not checked).
Prints each missing path as FILE:LINE: PATH and exits 1 if there is any.
"""
import os
import re
import sys

if sys.argv[1:] == ["--self-test"]:
    # The check itself: a tree whose documents name two missing paths and one that
    # exists must fail naming exactly the two.
    import subprocess
    import tempfile
    with tempfile.TemporaryDirectory() as t:
        os.makedirs(os.path.join(t, "include", "mdring", "plan"))
        open(os.path.join(t, "include", "mdring", "plan", "call.hpp"), "w").write("// see plan/gone.hpp\n")
        open(os.path.join(t, "README.md"), "w").write(
            "Read `include/mdring/plan/call.hpp`, [the map](docs/MAP.md) and `mdring/plan/call.hpp`.\n")
        r = subprocess.run([sys.executable, __file__, t], capture_output=True, text=True)
        got = sorted(line.split(": ", 1)[1] for line in r.stdout.splitlines() if ": " in line)
        want = ["docs/MAP.md", "plan/gone.hpp (in include/mdring)"]
        if r.returncode != 1 or got != want:
            sys.exit(f"check_paths --self-test: exit {r.returncode}, reported {got}, expected {want}")
    print("check_paths --self-test: the two missing paths found, the existing ones not")
    sys.exit(0)

root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), ".."))
TOP = ["include", "tests", "scripts", "docs", "benchmarks", "examples", "tools", "pmpi", "python", "cmake", ".ci"]
path_re = re.compile(r"(?<![\w./$-])((?:%s|mdring)/[\w./+-]*[\w+-])" % "|".join(re.escape(t) for t in TOP))
link_re = re.compile(r"\]\(([^)\s]+)\)")
# a header named from include/mdring (`plan/pipeline.hpp`), or by its file name alone
ROOMS = ["topology", "plan", "reduce", "transport", "executor", "collective", "rendezvous", "cuda"]
room_re = re.compile(r"(?<![\w./-])((?:%s)/[\w./-]*\.(?:hpp|cuh))\b" % "|".join(ROOMS))
bare_re = re.compile(r"(?<![\w./-])([\w-]+\.(?:hpp|cuh|cu)|test_\w+\.(?:cpp|py|c))\b")
SOURCE_EXT = (".hpp", ".cpp", ".cuh", ".cu", ".c", ".h", ".py", ".sh", ".cmake", ".txt", ".f90", ".in", ".json")


def candidates(text):
    for m in path_re.finditer(text):
        p = m.group(1).rstrip(".")
        after = text[m.end():m.end() + 1]
        if after in ("*", "<", "{", "$") or any(c in p for c in "*<>{}$"):
            continue
        if p.startswith("mdring/") and "." not in p.rsplit("/", 1)[-1]:
            continue  # "mdring/UCX" in a ratio, a store key: a header is named with its extension
        yield p


def exists(p):
    if p.startswith("mdring/"):
        return os.path.exists(os.path.join(root, "include", p))
    return os.path.exists(os.path.join(root, p))


EXAMPLE_NAMES = {"app.cu", "app.cpp", "app.c"}  # the user's program in an example command
names = set()
for dirpath, _, ns in os.walk(root):
    if "/.git" in dirpath or "/build" in dirpath or "/out" in dirpath or "/.devbuild" in dirpath:
        continue
    names.update(ns)


def files():
    yield os.path.join(root, "README.md")
    yield os.path.join(root, "CMakeLists.txt")
    for top in TOP:
        base = os.path.join(root, top)
        for dirpath, dirnames, names in os.walk(base):
            # corpora, generated data and caches are not prose
            dirnames[:] = [d for d in dirnames if d not in ("corpus", "__pycache__", "build", "perf", "scaling")]
            for n in names:
                if n.endswith(".md") or n.endswith(SOURCE_EXT) or top == ".ci":
                    yield os.path.join(dirpath, n)


missing = []
for f in files():
    if not os.path.isfile(f) or os.path.basename(f) == "check_paths.py":  # its self-test names missing paths
        continue
    try:
        lines = open(f, encoding="utf-8").read().split("\n")
    except UnicodeDecodeError:
        continue
    rel = os.path.relpath(f, root)
    for no, line in enumerate(lines, 1):
        seen = set()
        for p in candidates(line):
            if not exists(p) and p not in seen:
                seen.add(p)
                missing.append(f"{rel}:{no}: {p}")
        for m in room_re.finditer(line):
            if not os.path.exists(os.path.join(root, "include", "mdring", m.group(1))) and not exists(m.group(1)):
                missing.append(f"{rel}:{no}: {m.group(1)} (in include/mdring)")
        for m in bare_re.finditer(line):
            if m.group(1) not in names and m.group(1) not in EXAMPLE_NAMES:
                missing.append(f"{rel}:{no}: {m.group(1)} (no such file in the repository)")
        if "../" + "shared" in line:
            missing.append(f"{rel}:{no}: ../shared (outside the repository; the project does not name it)")
        if f.endswith(".md"):
            for m in link_re.finditer(line):
                target = m.group(1).split("#")[0]
                if not target or re.match(r"^[a-z]+:", target) or target in seen:
                    continue
                if not os.path.exists(os.path.normpath(os.path.join(os.path.dirname(f), target))):
                    missing.append(f"{rel}:{no}: link {m.group(1)}")

for m in missing:
    print(m)
if missing:
    print(f"check_paths: {len(missing)} references to paths that do not exist", file=sys.stderr)
    sys.exit(1)
print("check_paths: every named repository path exists")

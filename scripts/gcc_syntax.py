#!/usr/bin/env python3
"""Another compiler's front end over chosen files of a build.

A build compiled by clang (the ci preset: clang compiles the tests' -O0 C++ about
twice as fast as g++) leaves GCC unchecked. This script takes the compile commands
of the chosen files from the build's compile_commands.json
(CMAKE_EXPORT_COMPILE_COMMANDS), runs them with COMPILER -fsyntax-only -Werror
instead (GCC parses and instantiates every template the file uses, no code is
generated), and fails if any of them reports an error or a warning.

  gcc_syntax.py [--compiler g++] BUILD/compile_commands.json FILE[:TARGET]...

FILE is a path relative to the source tree; TARGET picks one of several commands
for the same file (the CMake target whose object directory it names, e.g.
tests/test_mpi.cpp:test_ucx). --self-test checks the command rewriting.
"""
import argparse
import json
import os
import shlex
import subprocess
import sys
import time


def rewrite(arguments, compiler):
    """The command with COMPILER, -fsyntax-only -Werror, and no output, depfile or
    clang-only option (-Xclang ARG: how clang's precompiled header is used; the
    file includes what it needs itself)."""
    out = [compiler]
    skip = 0
    for a in arguments[1:]:
        if skip:
            skip -= 1
            continue
        if a in ("-o", "-MT", "-MF", "-MQ", "-Xclang"):
            skip = 1
            continue
        if a in ("-c", "-MD", "-MMD", "-Winvalid-pch"):
            continue
        out.append(a)
    return out + ["-fsyntax-only", "-Werror"]


def entry_arguments(entry):
    if "arguments" in entry:
        return list(entry["arguments"])
    return shlex.split(entry["command"])


def pick(entries, source_dir, spec):
    path, _, target = spec.partition(":")
    want = os.path.normpath(os.path.join(source_dir, path))
    found = [e for e in entries if os.path.normpath(os.path.join(e["directory"], e["file"])) == want]
    if target:
        found = [e for e in found if f"/{target}.dir/" in " ".join(entry_arguments(e))]
    if len(found) != 1:
        names = sorted({o for e in found for o in entry_arguments(e) if o.endswith(".o")})
        raise SystemExit(f"gcc_syntax.py: {spec}: expected one compile command, found {len(found)}"
                         + (f" ({', '.join(names)}); name the target as FILE:TARGET" if names else ""))
    return found[0]


def self_test():
    cmd = ["/usr/bin/clang++", "-DX=1", "-I/i", "-O0", "-Winvalid-pch", "-Xclang", "-include-pch", "-Xclang",
           "p.pch", "-Xclang", "-include", "-Xclang", "p.hxx", "-MD", "-MT", "a.o", "-MF", "a.o.d", "-o", "a.o",
           "-c", "/s/a.cpp"]
    got = rewrite(cmd, "g++")
    want = ["g++", "-DX=1", "-I/i", "-O0", "/s/a.cpp", "-fsyntax-only", "-Werror"]
    assert got == want, got
    entries = [{"directory": "/b", "file": "/s/t.cpp", "command": "c++ -o b/one.dir/t.cpp.o -c /s/t.cpp"},
               {"directory": "/b", "file": "/s/t.cpp", "command": "c++ -o b/two.dir/t.cpp.o -c /s/t.cpp"}]
    assert pick(entries, "/s", "t.cpp:two") is entries[1]
    try:
        pick(entries, "/s", "t.cpp")
    except SystemExit as e:
        assert "found 2" in str(e) and "one.dir" in str(e), e
    else:
        raise AssertionError("an ambiguous file was accepted")
    print("gcc_syntax.py self-test: ok")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--compiler", default="g++")
    ap.add_argument("--source-dir", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    ap.add_argument("--self-test", action="store_true")
    ap.add_argument("database", nargs="?")
    ap.add_argument("files", nargs="*")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.database or not a.files:
        ap.error("needs the compile_commands.json and at least one FILE")
    with open(a.database) as f:
        entries = json.load(f)
    failed = 0
    for spec in a.files:
        e = pick(entries, a.source_dir, spec)
        cmd = rewrite(entry_arguments(e), a.compiler)
        t0 = time.monotonic()
        r = subprocess.run(cmd, cwd=e["directory"], capture_output=True, text=True)
        took = time.monotonic() - t0
        if r.returncode != 0:
            failed += 1
            print(f"== {spec}: {a.compiler} -fsyntax-only -Werror FAILED ({took:.1f} s)\n{shlex.join(cmd)}\n{r.stdout}{r.stderr}")
        else:
            print(f"== {spec}: {a.compiler} accepts it ({took:.1f} s)")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()

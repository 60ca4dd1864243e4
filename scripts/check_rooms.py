#!/usr/bin/env python3
"""scripts/check_rooms.py: no header includes one from a room above its own, and
none is longer than about 450 lines (at most MAX_LINES: a longer one does several
jobs; split it by job).

The rooms of include/mdring/ (docs/ARCHITECTURE.md), lowest first. A header may
include headers of its own room and of the rooms below it; never one above:

  0 basics      config.hpp, error.hpp, fnv.hpp, memory.hpp, vocabulary.hpp,
                version.hpp
  1 topology/   reduce/   (the machine as a value; the arithmetic of the ops)
  2 options.hpp tuning.hpp   (what a user sets; names links)
  3 rendezvous/           (how processes without MPI find each other)
  4 plan/                 (what each rank does, as data)
  5 transport/            (moving bytes between the ranks of a dimension)
  6 executor/             (running a program on a transport)
  7 collective/           (the public calls, bind, the communicator)
  8 cuda/   separate/     (the GPU path; separate compilation's face and library)
  9 entry headers         mdring.hpp, mpi.hpp, ucx.hpp, boost_mpi.hpp

    scripts/check_rooms.py            # prints every include that goes up and every header
                                      # over MAX_LINES, exits 1 if any
    scripts/check_rooms.py --graph    # also prints how many includes go from room to room
"""
import os
import re
import sys

MAX_LINES = 460
ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "include", "mdring")
BASICS = {"config.hpp", "error.hpp", "fnv.hpp", "memory.hpp", "vocabulary.hpp", "version.hpp"}
ENTRIES = {"mdring.hpp", "mpi.hpp", "ucx.hpp", "boost_mpi.hpp"}
LEVEL = {"basics": 0, "topology": 1, "reduce": 1, "options": 2, "rendezvous": 3, "plan": 4, "transport": 5,
         "executor": 6, "collective": 7, "cuda": 8, "separate": 8, "entry": 9}


def room_of(rel):
    parts = rel.split(os.sep)
    if len(parts) > 1:
        return parts[0]
    if rel in BASICS:
        return "basics"
    if rel in ENTRIES:
        return "entry"
    if rel in ("options.hpp", "tuning.hpp"):
        return "options"
    return None


def main():
    graph = "--graph" in sys.argv[1:]
    bad, unknown, edges = [], [], {}
    for dirpath, _, files in os.walk(ROOT):
        for f in sorted(files):
            if not f.endswith((".hpp", ".cuh", ".cpp")):
                continue
            path = os.path.join(dirpath, f)
            rel = os.path.relpath(path, ROOT)
            room = room_of(rel)
            with open(path, encoding="utf-8") as fh:
                n_lines = sum(1 for _ in fh)
            if n_lines > MAX_LINES and not f.endswith(".cpp"):
                bad.append(f"include/mdring/{rel}: {n_lines} lines, more than {MAX_LINES}: split it by job")
            if room not in LEVEL:
                unknown.append(rel)
                continue
            for no, line in enumerate(open(path, encoding="utf-8"), 1):
                m = re.match(r'\s*#\s*include\s+"([^"]+)"', line)
                if not m:
                    continue
                target = os.path.relpath(os.path.normpath(os.path.join(dirpath, m.group(1))), ROOT)
                troom = room_of(target)
                if troom not in LEVEL:
                    unknown.append(target)
                    continue
                if troom != room:
                    edges[(room, troom)] = edges.get((room, troom), 0) + 1
                if LEVEL[troom] > LEVEL[room]:
                    bad.append(f"include/mdring/{rel}:{no}: includes {target} ({troom}, above {room})")
    for line in bad:
        print(line)
    for rel in sorted(set(unknown)):
        print(f"include/mdring/{rel}: in no room (scripts/check_rooms.py lists the rooms)")
    if graph:
        for (a, b), n in sorted(edges.items(), key=lambda e: (-LEVEL[e[0][0]], -LEVEL[e[0][1]])):
            print(f"{a} -> {b}: {n}")
    if bad or unknown:
        return 1
    print(f"check_rooms: every include of include/mdring goes to its own room or one below, "
          f"and no header has more than {MAX_LINES} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

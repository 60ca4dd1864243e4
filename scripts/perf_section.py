#!/usr/bin/env python3
"""Puts a generated section into docs/PERFORMANCE.md.

    perf_section.py SECTION.md PAGE.md

SECTION.md starts with its "## " heading. The section of PAGE.md with the same
heading (up to the next "## " heading) is replaced; a new one is appended.
"""
import sys

sec_path, page_path = sys.argv[1], sys.argv[2]
sec = open(sec_path).read().rstrip() + "\n"
heading = sec.splitlines()[0]
page = open(page_path).read()
start = page.find(heading + "\n")
if start < 0:
    page = page.rstrip() + "\n\n" + sec
else:
    end = page.find("\n## ", start + len(heading))
    rest = page[end + 1:] if end >= 0 else ""
    page = page[:start] + sec + ("\n" + rest if rest else "")
open(page_path, "w").write(page)

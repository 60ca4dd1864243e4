"""The end of a page renderer (scripts/perf_report.py, scripts/scaling_report.py):
write the page, check it, or print it, as the command line asks."""
import difflib
import sys


def finish(page, path, shown, fix, clean=True):
    """--write: writes `page` to `path`; --check: 0 when the file at `path` is `page`
    and `clean`, else 1 with the first lines of the difference on stderr (`shown`
    names the page, `fix` says how to mend it); otherwise prints the page."""
    if "--write" in sys.argv:
        with open(path, "w") as f:
            f.write(page)
        return 0
    if "--check" in sys.argv:
        with open(path) as f:
            have = f.read()
        if have == page and clean:
            return 0
        if have != page:
            sys.stderr.write(f"{shown} is not what {fix}:\n")
            sys.stderr.writelines(list(difflib.unified_diff(have.splitlines(True), page.splitlines(True),
                                                            shown, "rendered"))[:60])
        return 1
    sys.stdout.write(page)
    return 0

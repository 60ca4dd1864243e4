#!/usr/bin/env python3
"""tests/nccl/check_symbols.py NCCL_H LIBRARY: libmdring-nccl.so exports exactly
NCCL's C API: every function nccl.h declares (ncclX, and its pnccl twin, as NCCL
exports them for profilers), the device API's ncclDevCommCreate/ncclDevCommDestroy
where nccl_device/core.h beside nccl.h declares them (NCCL's benchmark programs
probe them), and nothing else; and its soname is libnccl.so.2, so that it stands in
for NCCL under LD_PRELOAD or first on LD_LIBRARY_PATH.
Prints what is missing or extra; exits 1 if anything is."""
import os
import re
import subprocess
import sys


def main():
    header, lib = sys.argv[1], sys.argv[2]
    text = open(header, encoding="utf-8").read()
    declared = set(re.findall(r"^(?:ncclResult_t|const char\s*\*)\s+(nccl\w+)\s*\(", text, re.M))
    if len(declared) < 30:
        print(f"check_symbols: only {len(declared)} functions found in {header}: not nccl.h?")
        return 1
    expected = declared | {"p" + f for f in declared}
    device = os.path.join(os.path.dirname(header), "nccl_device", "core.h")
    if os.path.exists(device):
        dev_text = open(device, encoding="utf-8").read()
        expected |= {f for f in ("ncclDevCommCreate", "ncclDevCommDestroy") if f + "(" in dev_text}
    out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
    exported = {line.split()[-1] for line in out.splitlines() if len(line.split()) == 3 and line.split()[1] in "TWi"}
    missing = sorted(expected - exported)
    extra = sorted(s for s in exported - expected if not s.startswith("_"))
    dyn = subprocess.run(["objdump", "-p", lib], capture_output=True, text=True, check=True).stdout
    soname = re.search(r"SONAME\s+(\S+)", dyn)
    ok = True
    if missing:
        print(f"check_symbols: {len(missing)} of nccl.h's functions not exported: {' '.join(missing)}")
        ok = False
    if extra:
        print(f"check_symbols: {len(extra)} symbols exported that are not NCCL's: {' '.join(extra[:20])}")
        ok = False
    if not soname or soname.group(1) != "libnccl.so.2":
        print(f"check_symbols: the soname is {soname.group(1) if soname else 'missing'}, not libnccl.so.2")
        ok = False
    if ok:
        print(f"check_symbols: the {len(declared)} functions of {header} and their pnccl twins, "
              f"{len(expected) - 2 * len(declared)} of the device API's, nothing else; "
              f"soname libnccl.so.2")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

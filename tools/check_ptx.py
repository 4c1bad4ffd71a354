#!/usr/bin/env python3
"""Assemble every committed PTX module with ptxas for sm_90; fail on errors, spills or stack use.

    python tools/check_ptx.py [--arch sm_90]
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    args = ap.parse_args()
    ptxas = shutil.which("ptxas")
    if not ptxas:
        print("ptxas not found: install the CUDA toolkit to check PTX", file=sys.stderr)
        return 1
    bad = 0
    for ptx in sorted((ROOT / "ptx").glob("*.ptx")):
        proc = subprocess.run([ptxas, f"-arch={args.arch}", "-v", str(ptx), "-o", "/dev/null"],
                              capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode:
            print(f"FAIL {ptx.name}: ptxas exited {proc.returncode}\n{log}")
            bad += 1
            continue
        entries = re.findall(r"Compiling entry function '(\w+)'", log)
        frames = [int(x) for x in re.findall(r"(\d+) bytes stack frame", log)]
        spills = [int(a) + int(b) for a, b in re.findall(r"(\d+) bytes spill stores, (\d+) bytes spill loads", log)]
        if any(frames) or any(spills):
            print(f"FAIL {ptx.name}: local memory in use (stack frames {frames}, spills {spills})")
            bad += 1
        else:
            print(f"ok   {ptx.name}: {len(entries)} entries, no spills, no stack")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

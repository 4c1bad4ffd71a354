#!/usr/bin/env python3
"""Compile ptx/src/*.cu to the committed ptx/*.ptx.

    python tools/build_ptx.py            # rebuild every module
    python tools/build_ptx.py --check    # fail if a committed .ptx differs from a rebuild
    python tools/build_ptx.py gemv       # rebuild one module
    python tools/build_ptx.py --trace DIR   # timeline-traced modules (-DFG_TRACE) into DIR, for
                                            # FIXEDGRAPH_PTX_DIR=DIR (tools/timeline.py)
    python tools/build_ptx.py --trace DIR --light   # light records: thread 0 only, no entry barrier
    python tools/build_ptx.py attention -D NAME --out ptx_NAME   # an A/B build of a module under a
                                            # macro, for FIXEDGRAPH_PTX_DIR=$PWD/ptx_NAME

One module per .cu file (headers are *.cuh). Output is deterministic for a given nvcc: no line
info, no file paths, and a first line naming the nvcc release and flags so a reader knows how
to reproduce it. The PTX ISA must stay <= 9.0 (what driver 580 loads); nvcc 13.0 emits 9.0.
"""
from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "ptx" / "src"
OUT = ROOT / "ptx"
ARCH = "sm_90"
FLAGS = ["-ptx", f"-arch={ARCH}", "-O3", "-std=c++17", "-Xptxas=-O3", "--extra-device-vectorization"]
MAX_PTX_ISA = (9, 0)


def nvcc_release(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, check=True).stdout
    m = re.search(r"release [\d.]+, (V[\d.]+)", out)
    return m.group(1) if m else "unknown"


def compile_one(nvcc: str, cu: Path, release: str, extra: tuple[str, ...] = ()) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        dst = Path(tmp) / (cu.stem + ".ptx")
        cmd = [nvcc, *FLAGS, *extra, f"-I{SRC}", str(cu), "-o", str(dst)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            sys.exit(f"nvcc failed on {cu.relative_to(ROOT)}:\n{proc.stderr}")
        text = dst.read_text()
    m = re.search(r"^\.version (\d+)\.(\d+)", text, re.M)
    if not m or (int(m.group(1)), int(m.group(2))) > MAX_PTX_ISA:
        sys.exit(f"{cu.name}: PTX ISA {m.group(0) if m else '?'} is newer than {MAX_PTX_ISA}: driver 580 rejects it")
    header = f"// fixedgraph: {cu.relative_to(ROOT)} built by tools/build_ptx.py with nvcc {release} {' '.join([*FLAGS, *extra])}\n"
    return header + text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("modules", nargs="*", help="module names (default: all)")
    ap.add_argument("--check", action="store_true", help="compare with the committed PTX instead of writing")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    ap.add_argument("--trace", metavar="DIR", help="build with -DFG_TRACE (timeline records) into DIR instead")
    ap.add_argument("--light", action="store_true",
                    help="with --trace: light records (-DFG_TRACE_LIGHT: thread 0 only, no barrier at entry)")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                    help="a preprocessor macro (repeatable; needs --out or --trace: never the committed PTX)")
    ap.add_argument("--out", metavar="DIR", help="write the modules into DIR instead of ptx/")
    args = ap.parse_args()
    if args.defines and not (args.out or args.trace):
        sys.exit("-D builds a variant: give --out DIR (the committed ptx/ holds the plain build)")
    if args.out and (args.trace or args.check):
        sys.exit("--out does not combine with --trace or --check")
    if args.trace and args.check:
        sys.exit("--trace and --check do not combine")
    if args.light and not args.trace:
        sys.exit("--light needs --trace DIR")
    release = nvcc_release(args.nvcc)
    sources = sorted(SRC.glob("*.cu"))
    if args.modules:
        sources = [s for s in sources if s.stem in args.modules]
        missing = set(args.modules) - {s.stem for s in sources}
        if missing:
            sys.exit(f"no ptx/src/{{{','.join(sorted(missing))}}}.cu")
    stale = []
    out_dir = Path(args.trace or args.out or OUT)
    out_dir.mkdir(parents=True, exist_ok=True)
    for cu in sources:
        defs = (("-DFG_TRACE",) + (("-DFG_TRACE_LIGHT",) if args.light else ())) if args.trace else ()
        defs += tuple(f"-D{d}" for d in args.defines)
        text = compile_one(args.nvcc, cu, release, defs)
        dst = out_dir / (cu.stem + ".ptx")
        if args.check:
            if not dst.exists() or dst.read_text() != text:
                stale.append(dst.relative_to(ROOT))
        else:
            dst.write_text(text)
            print(f"wrote {dst} ({len(text):,} bytes)")
    if args.check:
        known = {s.stem for s in SRC.glob("*.cu")}
        orphans = [p.relative_to(ROOT) for p in OUT.glob("*.ptx") if p.stem not in known]
        if stale or orphans:
            for p in stale:
                print(f"stale: {p} differs from a rebuild of its source; run tools/build_ptx.py")
            for p in orphans:
                print(f"orphan: {p} has no source in ptx/src")
            return 1
        print(f"ok: {len(sources)} PTX modules match their sources")
    return 0


if __name__ == "__main__":
    sys.exit(main())

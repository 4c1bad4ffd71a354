#!/usr/bin/env python3
"""SASS bytes of one kernel entry by source function and line: where an entry's code comes from.

    python tools/sass_phases.py attention paged_attention_decode_rope_d128 [--layout] [--lines 20]

Compiles ptx/src/MODULE.cu for sm_90 with the flags tools/build_ptx.py uses plus -lineinfo
(a cubin, nothing committed changes), disassembles it with nvdisasm -g, and charges each
instruction (16 bytes) to the source line nvdisasm names for it, and that line to the function
whose definition encloses it in its file (a line at column 0 with a parenthesis opens one).
Why: code run cold after a PDL wait costs ~0.15-0.3 us a KB per launch (BENCHMARKS sessions 15
and 22), so what matters is which functions' code sits on the post-wait path and how big it is.
--layout also prints the entry's code in address order as runs of one function (>= 128 bytes).
Every ACQBULK (griddepcontrol.wait, a PDL wait: the main one, and those of paths that refuse
a launch or have no work) is listed with the bytes after it, and marked "|| wait ||" in the
layout; which one is the main wait the layout around it tells. -D NAME[=VALUE] builds under a
macro, as tools/build_ptx.py -D does for an A/B build (e.g. -D FG_MERGE_DEAD_KB=10).

nvdisasm: --nvdisasm PATH, else $NVDISASM, else on PATH, else from the pip wheel
nvidia-cuda-nvdisasm (`pip install nvidia-cuda-nvdisasm`; it is not a dependency of the project).
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))
import build_ptx  # noqa: E402

_LOC = re.compile(r'\s*//## File "(?P<file>[^"]+)", line (?P<line>\d+)')
_INSN = re.compile(r"\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+\S")
_DEF = re.compile(r"^[A-Za-z_].*\(")  # a definition's first line (column 0, a parenthesis)
_NAME = re.compile(r"([A-Za-z_]\w*)\s*\(")
_NOT_NAMES = {"if", "for", "while", "switch", "sizeof", "static_assert", "decltype", "alignas", "__align__",
              "__launch_bounds__"}


def entry_lines(text: str, entry: str) -> list[str] | None:
    """The lines of ``entry``'s section in an nvdisasm listing (up to the next .text.), or None."""
    lines = text.splitlines()
    head = f".text.{entry}:"
    start = next((i for i, l in enumerate(lines) if l.startswith(head)), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(".text.")), len(lines))
    return lines[start + 1:end]


def parse_sass(text: str, entry: str) -> list[tuple[int, str, int]]:
    """(address, file name, line) of every instruction of ``entry`` in an nvdisasm -g listing;
    instructions before any location get ("?", 0)."""
    body = entry_lines(text, entry)
    if body is None:
        raise SystemExit(f"sass_phases: no entry {entry!r} in the listing")
    out, loc = [], ("?", 0)
    for l in body:
        m = _LOC.match(l)
        if m:
            loc = (Path(m["file"]).name, int(m["line"]))
            continue
        m = _INSN.match(l)
        if m:
            out.append((int(m["addr"], 16), *loc))
    return out


_WAIT = re.compile(r"\s*/\*(?P<addr>[0-9a-f]{4,})\*/\s+ACQBULK\b")


def wait_addresses(text: str, entry: str) -> list[int]:
    """Addresses of ``entry``'s ACQBULK instructions (griddepcontrol.wait) in an nvdisasm listing."""
    return [int(m["addr"], 16) for l in entry_lines(text, entry) or [] if (m := _WAIT.match(l))]


def function_index(source: str) -> list[tuple[int, str]]:
    """(first line, name) of each definition in a source file, in line order: a line at column 0
    that holds a parenthesis and is not a comment, directive or declaration; the name is the
    first identifier before a parenthesis on it that is not a keyword or attribute (a template's
    own line is skipped)."""
    out = []
    for i, l in enumerate(source.splitlines(), 1):
        if not _DEF.match(l) or l.startswith(("#", "//", "template")):
            continue
        names = [n for n in _NAME.findall(l) if n not in _NOT_NAMES]
        if names and not l.rstrip().endswith(";"):
            out.append((i, names[0]))
    return out


def owner(index: list[tuple[int, str]], line: int) -> str:
    name = "?"
    for first, n in index:
        if first > line:
            break
        name = n
    return name


def summarize(insns: list[tuple[int, str, int]], sources: dict[str, str]) -> tuple[Counter, Counter, list]:
    """(bytes by function, bytes by (file, line), layout runs [(function, first address, bytes)])."""
    idx = {f: function_index(t) for f, t in sources.items()}
    by_fn, by_line, runs = Counter(), Counter(), []
    for addr, f, line in insns:
        fn = f"{f}:{owner(idx[f], line)}" if f in idx else f
        by_fn[fn] += 16
        by_line[(f, line)] += 16
        if runs and runs[-1][0] == fn:
            runs[-1][2] += 16
        else:
            runs.append([fn, addr, 16])
    return by_fn, by_line, runs


def find_nvdisasm(given: str | None) -> str:
    for cand in (given, os.environ.get("NVDISASM"), shutil.which("nvdisasm")):
        if cand and Path(cand).exists():
            return cand
    try:  # the pip wheel nvidia-cuda-nvdisasm
        import nvidia  # type: ignore

        for base in map(Path, nvidia.__path__):
            for p in base.glob("cu*/bin/nvdisasm"):
                return str(p)
    except ImportError:
        pass
    raise SystemExit("sass_phases: nvdisasm not found (pip install nvidia-cuda-nvdisasm, or --nvdisasm PATH)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module", help="ptx/src/MODULE.cu")
    ap.add_argument("entry", help="kernel entry name")
    ap.add_argument("--layout", action="store_true", help="print the code in address order by function")
    ap.add_argument("--lines", type=int, default=15, help="largest source lines to print")
    ap.add_argument("--nvcc", default=shutil.which("nvcc") or "nvcc")
    ap.add_argument("--nvdisasm")
    ap.add_argument("-D", dest="defines", action="append", default=[], metavar="NAME[=VALUE]",
                    help="a macro for an A/B build's code (repeatable)")
    args = ap.parse_args()
    cu = build_ptx.SRC / f"{args.module}.cu"
    if not cu.exists():
        raise SystemExit(f"sass_phases: no {cu.relative_to(ROOT)}")
    nvdisasm = find_nvdisasm(args.nvdisasm)
    flags = ["-cubin" if f == "-ptx" else f for f in build_ptx.FLAGS] + ["-lineinfo"]
    with tempfile.TemporaryDirectory() as tmp:
        cubin = Path(tmp) / "m.cubin"
        proc = subprocess.run([args.nvcc, *flags, *(f"-D{d}" for d in args.defines), f"-I{build_ptx.SRC}",
                               str(cu), "-o", str(cubin)],
                              capture_output=True, text=True)
        if proc.returncode:
            raise SystemExit(f"sass_phases: nvcc failed on {cu.relative_to(ROOT)}:\n{proc.stderr}")
        text = subprocess.run([nvdisasm, "-g", "-c", str(cubin)], capture_output=True, text=True, check=True).stdout
    insns = parse_sass(text, args.entry)
    sources = {p.name: p.read_text() for p in build_ptx.SRC.iterdir() if p.suffix in (".cu", ".cuh")}
    by_fn, by_line, runs = summarize(insns, sources)
    print(f"{args.entry}: {len(insns) * 16 / 1024:.1f} KB of SASS ({len(insns)} instructions)")
    waits = wait_addresses(text, args.entry)
    for w in waits:
        after = sum(16 for a, _, _ in insns if a > w)
        print(f"  PDL wait (ACQBULK) at {w / 1024:.1f} KB; {after / 1024:.1f} KB of code after it")
    for fn, b in by_fn.most_common():
        print(f"  {b / 1024:6.1f} KB  {fn}")
    print(f"largest source lines:")
    for (f, line), b in by_line.most_common(args.lines):
        print(f"  {b / 1024:6.2f} KB  {f}:{line}")
    if args.layout:
        print("layout (address KB: function (KB)):")
        parts, pending = [], list(waits)
        for fn, a, n in runs:
            while pending and a > pending[0]:
                parts.append("|| wait ||")
                pending.pop(0)
            if n >= 128:
                parts.append(f"{a / 1024:.1f}: {fn} ({n / 1024:.1f})")
        print("  " + " | ".join(parts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

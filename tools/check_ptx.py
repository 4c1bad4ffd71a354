#!/usr/bin/env python3
"""Assemble every committed PTX module with ptxas for sm_90; fail on errors, spills or stack use,
or a GEMV entry with more static shared memory than its launcher assumes.

    python tools/check_ptx.py [--arch sm_90] [--sizes]

--sizes also prints each entry's SASS size (its .text section in the cubin, read with readelf),
registers, and the decode chain's code per layer: code run after a PDL wait is fetched cold
(session 14: the lean GEMV entries, a third of the code, made 0.6B decode 3.3% faster), so the
size of what every SM cycles through per layer is worth watching.
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
sys.path.insert(0, str(ROOT))
from fixedgraph.residency import parse_ptxas_verbose  # noqa: E402
# One layer of the greedy decode chain (docs/KERNELS.md): norm + qkv, fused RoPE attention (head
# dim 128), o_proj, norm + gate_up + SiLU (norm + qkv's entry again), down_proj (o_proj's).
DECODE_LAYER = ("gemv_rmsnorm_bf16_row", "paged_attention_decode_rope_d128", "gemv_bf16_vec")


def text_sizes(cubin: Path, readelf: str) -> dict[str, int]:
    """Bytes of each entry's .text.<entry> section of a cubin (readelf -S -W)."""
    out = subprocess.run([readelf, "-S", "-W", str(cubin)], capture_output=True, text=True, check=True).stdout
    sizes = {}
    for m in re.finditer(r"\]\s+\.text\.(\S+)\s+\S+\s+[0-9a-f]+\s+[0-9a-f]+\s+([0-9a-f]+)", out):
        sizes[m.group(1)] = int(m.group(2), 16)
    return sizes


def registers(log: str) -> dict[str, int]:
    """Registers of each entry from ptxas -v output."""
    return {e: regs for e, (regs, _) in parse_ptxas_verbose(log).items()}


def static_smem(log: str) -> dict[str, int]:
    """Static shared memory bytes of each entry from ptxas -v output (0 where none)."""
    return {e: smem for e, (_, smem) in parse_ptxas_verbose(log).items()}


def smem_budget() -> dict[str, int]:
    """Static shared memory the launchers assume (fixedgraph.ops.gemv): more in the PTX would
    make a launch ask for more than an SM has, or fit fewer CTAs per SM than its preload depth
    was sized for."""
    from fixedgraph.ops import gemv

    return {e: gemv.STATIC_SMEM for e in ("gemv_bf16", "gemv_bf16_vec", "gemv_rmsnorm_bf16_row",
                                           "gemv_rmsnorm_bf16_row_dn", "gemv_rmsnorm_bf16_row_dw", "gemv_rmsnorm_bf16",
                                           "gemv_rmsnorm_silu_bf16")}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="sm_90")
    ap.add_argument("--sizes", action="store_true", help="print each entry's SASS bytes and registers")
    args = ap.parse_args()
    ptxas = shutil.which("ptxas")
    if not ptxas:
        print("ptxas not found: install the CUDA toolkit to check PTX", file=sys.stderr)
        return 1
    readelf = shutil.which("readelf")
    if args.sizes and not readelf:
        print("readelf not found: install binutils for --sizes", file=sys.stderr)
        return 1
    bad = 0
    budget = smem_budget()
    table: list[tuple[str, str, int, int]] = []
    with tempfile.TemporaryDirectory() as tmp:
        for ptx in sorted((ROOT / "ptx").glob("*.ptx")):
            cubin = Path(tmp, ptx.stem + ".cubin")
            proc = subprocess.run([ptxas, f"-arch={args.arch}", "-v", str(ptx), "-o", str(cubin)],
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
            for entry, have in static_smem(log).items():
                limit = budget.get(entry)
                if limit is not None and have > limit:
                    print(f"FAIL {ptx.name}: {entry} has {have} bytes of static shared memory, more than the {limit} "
                          "its launcher assumes (fixedgraph/ops/gemv.py): raise the constant")
                    bad += 1
            if args.sizes:
                regs = registers(log)
                table += [(e, ptx.stem, n, regs.get(e, -1)) for e, n in text_sizes(cubin, readelf).items()]
    if args.sizes and table:
        print(f"\n{'entry':<36} {'module':<12} {'SASS KB':>8} {'regs':>5}")
        for entry, module, n, r in sorted(table, key=lambda row: -row[2]):
            print(f"{entry:<36} {module:<12} {n / 1024:8.1f} {r:5d}")
        size = {e: n for e, _, n, _ in table}
        layer = [(e, size[e]) for e in DECODE_LAYER if e in size]
        print(f"\ndecode layer (each entry's code once): {sum(n for _, n in layer) / 1024:.1f} KB = "
              + " + ".join(f"{e} {n / 1024:.1f}" for e, n in layer))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

"""Launchers for ptx/src/meta.cu: staging the per-pass metadata, and row gathers."""
from __future__ import annotations

from fixedgraph.program import Arg, Program

STAGE_META_SRC_PARAM = 1  # index of the `src` parameter, patched per step


def stage_meta(prog: Program, dst: Arg, src: Arg, nbytes: int, label: str = "stage metadata") -> int:
    """Copy ``nbytes`` (a multiple of 4) of host staging (device-mapped) into ``dst``.

    Returns the op index: the decode loop patches its ``src`` to the step's staging slot.
    """
    if nbytes % 4:
        raise ValueError(f"metadata blob of {nbytes} bytes is not a whole number of 32-bit words")
    return prog.launch("stage_meta", 1, 256, [dst, src, nbytes // 4], label=label)


def gather_rows_bf16(prog: Program, out: Arg, inp: Arg, idx: Arg, n: int, T: int, H: int,
                     label: str = "gather rows") -> int:
    """out [n, H] bf16 = inp [T, H] bf16 at rows idx [n] i32 (clamped to 0 when out of range)."""
    return prog.launch("gather_rows_bf16", n, min(1024, max(32, (H // 8 + 31) // 32 * 32)),
                       [out, inp, idx, T, H], label=label)

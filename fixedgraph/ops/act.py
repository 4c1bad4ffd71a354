"""Launcher of ptx/src/act.cu: the gated MLP activation silu(gate) * up.

The kernel needs no scratch memory.
"""
from __future__ import annotations

from fixedgraph.program import Arg, Program

BLOCK = 128
MAX_ROW_BLOCKS = 1024  # blockIdx.x strides over a row's columns past this
MAX_GRID_Y = 65535  # the hardware limit; rows stride over blockIdx.y past this


def silu_mul(prog: Program, out: Arg, gate_up: Arg, rows: int, I: int,
             label: str = "silu_mul") -> int:
    """out = bf16(bf16(silu(gate)) * up) with gate = gate_up[:, :I], up = gate_up[:, I:].

    out: [rows, I] bf16, written. gate_up: [rows, 2*I] bf16. Returns the op index.
    """
    if rows < 1 or I < 1:
        raise ValueError(f"silu_mul needs rows, I >= 1; got rows={rows}, I={I}")
    vecs = I // 8 if I % 8 == 0 else I  # 16-byte accesses when I % 8 == 0
    grid = (min(-(-vecs // BLOCK), MAX_ROW_BLOCKS), min(rows, MAX_GRID_Y), 1)
    return prog.launch("silu_mul", grid, (BLOCK, 1, 1), (out, gate_up, int(rows), int(I)),
                       label=label)

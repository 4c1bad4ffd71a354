"""Launcher of ptx/src/argmax.cu: greedy token choice per row.

The kernel needs no scratch memory.
"""
from __future__ import annotations

from fixedgraph.program import Arg, Null, Program

MAX_V = (1 << 31) - 1  # indices are i32


def argmax_rows(prog: Program, tokens: Arg, ring: Arg | None, step: Arg | None, ring_len: int,
                logits: Arg, rows: int, V: int, label: str = "argmax") -> int:
    """tokens[r] = argmax over v of logits[r, v]: ties to the lowest index, NaN below everything.

    tokens: [rows] i32, written. logits: [rows, V] f32.
    ring: [ring_len, rows] i32 (usually a HostPtr to host-mapped memory) or None; when given,
      ring[(step[0] % ring_len) * rows + r] = tokens[r] as well.
    step: [1] u32 step counter or None (reads as 0). ring_len: ring depth, >= 1 with a ring.
    One CTA per row. Returns the op index.
    """
    if rows < 1 or not 1 <= V <= MAX_V:
        raise ValueError(f"argmax_rows needs rows >= 1 and 1 <= V < 2^31; got rows={rows}, V={V}")
    if ring is not None and ring_len < 1:
        raise ValueError(f"argmax_rows with a token ring needs ring_len >= 1, got {ring_len}")
    want = -(-V // 16)  # about four float4 loads a thread
    block = max(64, min(1024, -(-want // 32) * 32))
    args = (tokens, Null() if ring is None else ring, Null() if step is None else step,
            int(ring_len), logits, int(rows), int(V))
    return prog.launch("argmax_rows", (rows, 1, 1), (block, 1, 1), args, label=label)

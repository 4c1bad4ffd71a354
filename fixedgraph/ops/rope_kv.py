"""Launcher of ptx/src/rope_kv.cu: QK-norm + rotary embedding + paged KV write.

The kernel needs no scratch memory.
"""
from __future__ import annotations

from fixedgraph.program import Arg, Null, Program

WARPS_PER_BLOCK = 4  # one warp per (row, head) item
MAX_BLOCKS = 8192  # warps stride over the rest; enough to fill 132 SMs many times over
MAX_HEAD_DIM = 256


def _ptr(a: Arg | None) -> Arg:
    return Null() if a is None else a


def qk_norm_rope_kv(prog: Program, qkv: Arg, q_out: Arg, q_norm: Arg | None, k_norm: Arg | None,
                    rope: Arg, positions: Arg, slots: Arg, k_pool: Arg, v_pool: Arg, rows: int,
                    Hq: int, Hkv: int, D: int, eps: float, label: str = "qk_norm_rope_kv") -> int:
    """Rotate q and k at each row's position, write q out and k, v into the KV pools.

    qkv: [rows, (Hq + 2*Hkv) * D] bf16, q heads then k heads then v heads (bias already added).
    q_out: [rows, Hq * D] bf16, written.
    q_norm, k_norm: [D] bf16 per-head RMSNorm weights (Qwen3 QK-norm), or None for no norm;
      rounding as add_rmsnorm: bf16(w * bf16(x * rsqrt(mean(x^2) + eps))).
    rope: [max_pos, D/2, 2] f32 (cos, sin); rotate_half pairing (i, i + D/2).
    positions: [rows] u32, each < max_pos. slots: [rows] i64 KV slot; negative = no KV write.
    k_pool, v_pool: [num_blocks, block_size, Hkv, D] bf16; row r's head h lands at element
      slots[r] * Hkv * D + h * D. Rows' live slots must be distinct.
    D even, 2..256. Returns the op index.
    """
    if rows < 1 or Hq < 1 or Hkv < 1:
        raise ValueError(f"qk_norm_rope_kv needs rows, Hq, Hkv >= 1; got {rows}, {Hq}, {Hkv}")
    if D % 2 or not 2 <= D <= MAX_HEAD_DIM:
        raise ValueError(f"qk_norm_rope_kv needs an even head_dim in [2, {MAX_HEAD_DIM}], got {D}")
    items = rows * (Hq + 2 * Hkv)
    grid = min(-(-items // WARPS_PER_BLOCK), MAX_BLOCKS)
    args = (qkv, q_out, _ptr(q_norm), _ptr(k_norm), rope, positions, slots, k_pool, v_pool,
            int(rows), int(Hq), int(Hkv), int(D), float(eps))
    return prog.launch("qk_norm_rope_kv", (grid, 1, 1), (32 * WARPS_PER_BLOCK, 1, 1), args,
                       label=label)

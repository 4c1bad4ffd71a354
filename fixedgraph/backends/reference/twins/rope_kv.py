"""Numpy twin of ptx/src/rope_kv.cu: qk_norm_rope_kv (QK-norm, rotary embedding, KV write)."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin
from fixedgraph.backends.reference.twins.embed_norm import rms_norm_bf16

MAX_HALF = 128  # the kernel handles head_dim <= 256


def _rotate(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """rotate_half RoPE in float32 with each product rounded, as the kernel's unfused ops."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


@twin("qk_norm_rope_kv")
def qk_norm_rope_kv(mem, grid, block, qkv, q_out, q_norm, k_norm, rope, positions, slots,
                    k_pool, v_pool, rows, Hq, Hkv, D, eps):
    half = D // 2
    if block[0] % 32 or D % 2 or half == 0 or half > MAX_HALF:
        return  # the kernel refuses such launches and writes nothing
    heads = Hq + 2 * Hkv
    raw = mem.view(qkv, np.uint16, rows * heads * D).reshape(rows, heads, D)  # bf16 bits
    x = bf16.to_f32(raw)
    pos = mem.view(positions, np.uint32, rows).astype(np.int64)  # [rows]
    slot = mem.view(slots, np.int64, rows)  # [rows]
    table = mem.view(rope, np.float32, (int(pos.max()) + 1) * D).reshape(-1, half, 2)
    cos = table[pos, :, 0][:, None, :]  # [rows, 1, half]
    sin = table[pos, :, 1][:, None, :]

    q, k = x[:, :Hq], x[:, Hq:Hq + Hkv]
    if q_norm:
        q = rms_norm_bf16(q, bf16.to_f32(mem.view(q_norm, np.uint16, D)), eps)
    if k_norm:
        k = rms_norm_bf16(k, bf16.to_f32(mem.view(k_norm, np.uint16, D)), eps)
    mem.view(q_out, np.uint16, rows * Hq * D)[:] = bf16.from_f32(_rotate(q, cos, sin)).ravel()

    live = slot >= 0  # a negative slot skips the row's KV write
    if not live.any():
        return
    n_slots = int(slot[live].max()) + 1
    kp = mem.view(k_pool, np.uint16, n_slots * Hkv * D).reshape(n_slots, Hkv, D)
    vp = mem.view(v_pool, np.uint16, n_slots * Hkv * D).reshape(n_slots, Hkv, D)
    kp[slot[live]] = bf16.from_f32(_rotate(k[live], cos[live], sin[live]))
    vp[slot[live]] = raw[live, Hq + Hkv:]  # v bits unchanged

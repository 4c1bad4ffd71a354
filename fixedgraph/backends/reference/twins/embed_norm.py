"""Numpy twins of ptx/src/embed_norm.cu: embed_gather and add_rmsnorm (one CTA per row, so the
row count is grid[0])."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin


@twin("embed_gather")
def embed_gather(mem, grid, block, hidden, table, tokens, H, V):
    rows = grid[0]
    tok = mem.view(tokens, np.int32, rows).astype(np.int64)  # [rows] i32
    out = mem.view(hidden, np.float32, rows * H).reshape(rows, H)  # [rows, H] f32
    ok = (tok >= 0) & (tok < V)
    if ok.any():
        tab = mem.view(table, np.uint16, V * H).reshape(V, H)  # [V, H] bf16
        out[ok] = bf16.to_f32(tab[tok[ok]])
    out[~ok] = np.nan  # the kernel's visible marker for an out-of-range token


def rms_scale(x: np.ndarray, n: int, eps: float) -> np.ndarray:
    """1 / sqrt(mean(x^2) + eps) over the last axis in float32, as the kernel computes it."""
    sumsq = np.sum(x * x, axis=-1, dtype=np.float32, keepdims=True)
    return np.float32(1.0) / np.sqrt(sumsq / np.float32(n) + np.float32(eps))


def rms_norm_bf16(x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
    """bf16(weight * bf16(x * inv_rms)) as float32 values; x float32, weight float32 [n]."""
    normed = bf16.round_f32(x * rms_scale(x, x.shape[-1], eps))
    return bf16.round_f32(weight * normed)


@twin("add_rmsnorm")
def add_rmsnorm(mem, grid, block, hidden, delta, weight, out, H, eps):
    if block[0] % 32:
        return  # the kernel refuses partial warps and writes nothing
    rows = grid[0]
    h = mem.view(hidden, np.float32, rows * H).reshape(rows, H)  # [rows, H] f32, in place
    if delta:
        h += bf16.to_f32(mem.view(delta, np.uint16, rows * H).reshape(rows, H))  # fp32 add
    w = bf16.to_f32(mem.view(weight, np.uint16, H))  # [H]
    o = mem.view(out, np.uint16, rows * H).reshape(rows, H)  # [rows, H] bf16
    o[:] = bf16.from_f32(rms_norm_bf16(h, w, eps))

"""Numpy twins of ptx/src/gemv.cu: decode GEMV, out = x @ W.T (+ bias), fp32 accumulate.

``linear_f32`` is the shared core of the GEMV and GEMM twins (both compute the same
formula; only the kernels' tiling differs).
"""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin

GEMV_THREADS = 256  # the kernel's fixed block size (its warp/k-split layout assumes it)


def linear_f32(mem, x: int, w: int, bias: int, rows: int, N: int, K: int) -> np.ndarray:
    """x [rows, K] bf16 @ W [N, K] bf16 .T (+ bias [N] bf16) -> [rows, N] float32.

    float32 products summed in float32, as the tensor cores do (the summation order differs
    from the GPU's; the kernel cases' tolerances allow for that).
    """
    xs = bf16.to_f32(mem.view(x, np.uint16, rows * K)).reshape(rows, K)
    ws = bf16.to_f32(mem.view(w, np.uint16, N * K)).reshape(N, K)
    y = xs @ ws.T
    if bias:
        y += bf16.to_f32(mem.view(bias, np.uint16, N))
    return y


def store(mem, out: int, y: np.ndarray, out_f32: bool) -> None:
    """Write [rows, N] float32 results as the kernel does: f32 as is, or rounded once to bf16."""
    if out_f32:
        mem.view(out, np.float32, y.size)[:] = y.ravel()
    else:
        mem.view(out, np.uint16, y.size)[:] = bf16.from_f32(y).ravel()


def _check_block(entry: str, block) -> None:
    if tuple(block) != (GEMV_THREADS, 1, 1):
        raise ValueError(f"{entry} needs block ({GEMV_THREADS}, 1, 1), got {tuple(block)}; launch it via fixedgraph.ops.gemv")


@twin("gemv_bf16")
def gemv_bf16(mem, grid, block, out, x, w, bias, rows, N, K):
    # out [rows, N] bf16; x [rows, K] bf16; w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemv_bf16", block)
    store(mem, out, linear_f32(mem, x, w, bias, rows, N, K), out_f32=False)


@twin("gemv_bf16_f32out")
def gemv_bf16_f32out(mem, grid, block, out, x, w, bias, rows, N, K):
    # out [rows, N] f32; x [rows, K] bf16; w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemv_bf16_f32out", block)
    store(mem, out, linear_f32(mem, x, w, bias, rows, N, K), out_f32=True)

"""Numpy twins of ptx/src/gemm.cu: prefill GEMM, out = x @ W.T (+ bias), fp32 accumulate."""
from __future__ import annotations

from fixedgraph.backends.reference.twins import twin
from fixedgraph.backends.reference.twins.gemv import linear_f32, store

GEMM_THREADS = 256  # the kernel's fixed block size (2 x 4 warps per tile)


def _check_block(entry: str, block) -> None:
    if tuple(block) != (GEMM_THREADS, 1, 1):
        raise ValueError(f"{entry} needs block ({GEMM_THREADS}, 1, 1), got {tuple(block)}; launch it via fixedgraph.ops.gemm")


@twin("gemm_bf16")
def gemm_bf16(mem, grid, block, out, x, w, bias, M, N, K):
    # out [M, N] bf16; x [M, K] bf16; w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemm_bf16", block)
    store(mem, out, linear_f32(mem, x, w, bias, M, N, K), out_f32=False)


@twin("gemm_bf16_f32out")
def gemm_bf16_f32out(mem, grid, block, out, x, w, bias, M, N, K):
    # out [M, N] f32; x [M, K] bf16; w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemm_bf16_f32out", block)
    store(mem, out, linear_f32(mem, x, w, bias, M, N, K), out_f32=True)

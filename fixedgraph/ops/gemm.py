"""Launcher of ptx/src/gemm.cu: the prefill GEMM out = x @ W.T (+ bias) on tensor cores.

The kernel needs no scratch memory and uses 48 KiB of static shared memory (no dynamic).
"""
from __future__ import annotations

from fixedgraph.program import Arg, Null, Program

THREADS = 256  # 2 x 4 warps per CTA tile; the kernel assumes exactly this block
LARGE_TILE = 128  # 128x128 tiles when there are enough of them...
SMALL_TILE = 64  # ...else 64x64 tiles (small M or N: more CTAs)
LARGE_MIN_TILES = 264  # two CTAs on each of 132 SMs; mirrors GEMM_LARGE_MIN_TILES in gemm.cu
MAX_GRID = 1 << 20  # far more CTAs than ever run at once; keeps gridDim.x in range


def gemm_tile(M: int, N: int) -> int:
    """Square CTA tile edge the kernel picks for (M, N); mirrors gemm_entry() in gemm.cu."""
    large = -(-M // LARGE_TILE) * -(-N // LARGE_TILE)
    return LARGE_TILE if large >= LARGE_MIN_TILES else SMALL_TILE


def gemm_grid(M: int, N: int) -> int:
    """One CTA per output tile (the kernel takes tiles grid-stride, so any grid is correct)."""
    tile = gemm_tile(M, N)
    return -(-M // tile) * -(-N // tile)


def gemm(prog: Program, out: Arg, x: Arg, w: Arg, bias: Arg | None, M: int, N: int, K: int,
         out_f32: bool = False, label: str = "") -> int:
    """out[m, n] = sum_k x[m, k] * w[n, k] (+ bias[n]), fp32 accumulation, rounded once.

    out: [M, N] bf16, or f32 when ``out_f32``; written.
    x: [M, K] bf16. w: [N, K] bf16 (PyTorch Linear layout, row-major).
    bias: [N] bf16, or None / Null() for no bias; added in fp32 before rounding.
    Meant for M > 8 (prefill); any M, N, K >= 1 is correct. K % 8 == 0 with 16-byte-aligned
    x and w takes the cp.async pipeline; other K take a slower scalar-load path.
    Returns the op index.
    """
    M, N, K = int(M), int(N), int(K)
    if not all(1 <= d < 1 << 31 for d in (M, N, K)):
        raise ValueError(f"gemm needs 1 <= M, N, K < 2**31; got M={M}, N={N}, K={K}")
    grid = min(gemm_grid(M, N), MAX_GRID)  # the kernel strides over any further tiles
    entry = "gemm_bf16_f32out" if out_f32 else "gemm_bf16"
    return prog.launch(entry, (grid, 1, 1), (THREADS, 1, 1),
                       (out, x, w, Null() if bias is None else bias, M, N, K), label=label or entry)

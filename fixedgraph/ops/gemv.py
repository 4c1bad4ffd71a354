"""Launcher of ptx/src/gemv.cu: the decode GEMV out = x @ W.T (+ bias) for 1..8 rows.

The kernel needs no scratch memory: when N is small it splits K across the warps of a block
and reduces in shared memory, so one launch covers the GPU without a second pass.
"""
from __future__ import annotations

from fixedgraph.program import Arg, Null, Program

THREADS = 256  # 8 warps; the kernel's warp layout assumes exactly this block
WARPS = 8
TILE_N = 16  # output columns per warp tile (the mma M dimension)
UNROLL = 4  # k32 blocks in flight per warp
TARGET_WARPS = 2048  # ~16 warps per SM on the H200's 132 SMs
MIN_KBLOCKS = 2  # k32 blocks per warp worth splitting K for
MAX_ROWS = 8  # the mma N dimension: W is streamed once for up to 8 rows


def gemv_split(N: int, K: int) -> int:
    """Warps per 16-column tile (K split inside a block); mirrors gemv_split() in gemv.cu.

    A mismatch with the kernel would only change speed: the kernel takes tiles grid-stride.
    """
    tiles = -(-N // TILE_N)
    kblocks = -(-K // 32)
    s = 1
    while s < WARPS and tiles * s < TARGET_WARPS and kblocks >= 2 * s * MIN_KBLOCKS:
        s *= 2
    return s


def gemv_grid(N: int, K: int) -> int:
    """Blocks for one launch: one per group of WARPS // gemv_split(N, K) column tiles."""
    tiles = -(-N // TILE_N)
    tiles_per_block = WARPS // gemv_split(N, K)
    return -(-tiles // tiles_per_block)


def gemv(prog: Program, out: Arg, x: Arg, w: Arg, bias: Arg | None, rows: int, N: int, K: int,
         out_f32: bool = False, label: str = "") -> int:
    """out[r, n] = sum_k x[r, k] * w[n, k] (+ bias[n]), fp32 accumulation, rounded once.

    out: [rows, N] bf16, or f32 when ``out_f32`` (logits); written.
    x: [rows, K] bf16. w: [N, K] bf16 (PyTorch Linear layout, row-major).
    bias: [N] bf16, or None / Null() for no bias; added in fp32 before rounding.
    rows: 1..8 (use ``fixedgraph.ops.linear.linear`` to pick GEMM above 8).
    Any K works; K % 8 == 0 with 16-byte-aligned x and w takes the fast 16-byte-load path.
    Returns the op index.
    """
    rows, N, K = int(rows), int(N), int(K)
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"gemv takes 1..{MAX_ROWS} rows, got {rows}; use fixedgraph.ops.gemm.gemm (or linear) for more")
    if not (1 <= N < 1 << 31 and 1 <= K < 1 << 31):
        raise ValueError(f"gemv needs 1 <= N, K < 2**31; got N={N}, K={K}")
    entry = "gemv_bf16_f32out" if out_f32 else "gemv_bf16"
    return prog.launch(entry, (gemv_grid(N, K), 1, 1), (THREADS, 1, 1),
                       (out, x, w, Null() if bias is None else bias, rows, N, K), label=label or entry)

"""Numpy twins of ptx/src/gemv.cu: decode GEMV, out = x @ W.T (+ bias), fp32 accumulate, and
the fused entries whose x is built from the previous op's output (RMSNorm, silu * up).

``linear_f32`` is the shared core of the GEMV and GEMM twins (both compute the same
formula; only the kernels' tiling differs).
"""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin
from fixedgraph.backends.reference.twins.argmax import argmax_nan_low
from fixedgraph.backends.reference.twins.embed_norm import rms_norm_bf16, rms_scale

GEMV_BLOCKS = ((256, 1, 1), (512, 1, 1))  # the block sizes the kernels' warp layout takes


def linear_f32(mem, x: int, w: int, bias: int, rows: int, N: int, K: int) -> np.ndarray:
    """x [rows, K] bf16 @ W [N, K] bf16 .T (+ bias [N] bf16) -> [rows, N] float32.

    float32 products summed in float32, as the tensor cores do (the summation order differs
    from the GPU's; the kernel cases' tolerances allow for that).
    """
    xs = bf16.to_f32(mem.view(x, np.uint16, rows * K)).reshape(rows, K)
    return matmul_f32(mem, xs, w, bias, N, K)


def matmul_f32(mem, xs: np.ndarray, w: int, bias: int, N: int, K: int) -> np.ndarray:
    """xs [rows, K] float32 (bf16 values) @ W [N, K] bf16 .T (+ bias [N] bf16) -> float32."""
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
    if tuple(block) not in GEMV_BLOCKS:
        raise ValueError(f"{entry} needs block (256, 1, 1) or (512, 1, 1), got {tuple(block)}; "
                         "launch it via fixedgraph.ops.gemv")


@twin("gemv_bf16")
def gemv_bf16(mem, grid, block, out, x, w, bias, rows, N, K, split):
    # out [rows, N] bf16; x [rows, K] bf16; w [N, K] bf16; bias [N] bf16 or 0; split: the k split
    # (warps per column tile; changes only the summation order)
    _check_block("gemv_bf16", block)
    store(mem, out, linear_f32(mem, x, w, bias, rows, N, K), out_f32=False)


@twin("gemv_bf16_f32out")
def gemv_bf16_f32out(mem, grid, block, out, x, w, bias, rows, N, K, split):
    # out [rows, N] f32; x [rows, K] bf16; w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemv_bf16_f32out", block)
    store(mem, out, linear_f32(mem, x, w, bias, rows, N, K), out_f32=True)


def _gemv_rmsnorm(mem, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, eps, out_f32, silu=False,
                  defer=False):
    h = mem.view(hidden_in, np.float32, rows * K).reshape(rows, K).copy()  # [rows, K] f32
    if delta:
        h += bf16.to_f32(mem.view(delta, np.uint16, rows * K).reshape(rows, K))  # fp32 add
    if hidden_out:
        mem.view(hidden_out, np.float32, rows * K)[:] = h.ravel()
    wn = bf16.to_f32(mem.view(norm_w, np.uint16, K))
    if defer:  # gemv_rmsnorm_bf16_row_dn: x = bf16(w * h); the products scaled by 1 / rms, then the bias
        y = matmul_f32(mem, bf16.round_f32(wn * h), w, 0, N, K) * rms_scale(h, K, eps)
        if bias:
            y += bf16.to_f32(mem.view(bias, np.uint16, N))
    else:
        x = rms_norm_bf16(h, wn, eps)  # add_rmsnorm's rounding
        y = matmul_f32(mem, x, w, bias, N, K)
    if silu:  # gate_up rounded to bf16 as if stored, then silu_mul: [rows, N/2]
        gu = bf16.round_f32(y)
        y = silu_mul_f32(gu[:, : N // 2], gu[:, N // 2:])
    store(mem, out, y, out_f32)


@twin("gemv_rmsnorm_bf16")
def gemv_rmsnorm_bf16(mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, split,
                      eps):
    # out [rows, N] bf16; hidden_in [rows, K] f32; delta [rows, K] bf16 or 0; hidden_out [rows, K]
    # f32 or 0 (= hidden_in + delta); norm_w [K] bf16; w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemv_rmsnorm_bf16", block)
    _gemv_rmsnorm(mem, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, eps, False)


@twin("gemv_rmsnorm_bf16_f32out")
def gemv_rmsnorm_bf16_f32out(mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K,
                             split, eps):
    # as gemv_rmsnorm_bf16 with out [rows, N] f32
    _check_block("gemv_rmsnorm_bf16_f32out", block)
    _gemv_rmsnorm(mem, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, eps, True)


@twin("gemv_rmsnorm_silu_bf16")
def gemv_rmsnorm_silu_bf16(mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, split,
                           eps):
    # out [rows, N/2] bf16 = silu_mul of gate_up = gemv_rmsnorm_bf16(...) with w [N, K] = gate | up rows
    _check_block("gemv_rmsnorm_silu_bf16", block)
    if N % 2:
        return  # the kernel refuses an odd N and writes nothing
    _gemv_rmsnorm(mem, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, eps, False, silu=True)


def silu_mul_f32(gate: np.ndarray, up: np.ndarray) -> np.ndarray:
    """bf16(bf16(silu(gate)) * up) as float32 values: act.cu's silu_mul rounding."""
    with np.errstate(over="ignore"):  # exp(-gate) overflows to inf for gate < -88: silu -> -0
        act = bf16.round_f32(gate / (np.float32(1.0) + np.exp(-gate)))
    return bf16.round_f32(act * up)


@twin("gemv_silu_bf16")
def gemv_silu_bf16(mem, grid, block, out, gate_up, w, bias, rows, N, K, split):
    # out [rows, N] bf16; gate_up [rows, 2K] bf16 (gate | up); w [N, K] bf16; bias [N] bf16 or 0
    _check_block("gemv_silu_bf16", block)
    gu = bf16.to_f32(mem.view(gate_up, np.uint16, rows * 2 * K).reshape(rows, 2 * K))
    store(mem, out, matmul_f32(mem, silu_mul_f32(gu[:, :K], gu[:, K:]), w, bias, N, K), False)


@twin("gemv_rmsnorm_argmax")
def gemv_rmsnorm_argmax(mem, grid, block, logits, tokens, ring, step, ring_len, part, counter, hidden_in, delta,
                        hidden_out, norm_w, w, bias, rows, N, K, eps):
    # logits [rows, N] f32; tokens [rows] i32; ring [ring_len, rows] i32 or 0; step [1] u32 or 0;
    # part / counter: the kernel's scratch (the twin needs none; the counter stays 0);
    # the rest as gemv_rmsnorm_bf16_f32out
    _check_block("gemv_rmsnorm_argmax", block)
    if K % 8 or w % 16 or rows > 8:
        return  # the kernel's 16-byte path only: it writes nothing
    _gemv_rmsnorm(mem, logits, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, eps, True)
    tok = argmax_nan_low(mem.view(logits, np.float32, rows * N).reshape(rows, N))
    mem.view(tokens, np.int32, rows)[:] = tok
    if ring and ring_len:
        s = int(mem.view(step, np.uint32, 1)[0]) if step else 0
        mem.view(ring, np.int32, ring_len * rows)[(s % ring_len) * rows:][:rows] = tok


# The lean entries (gemv.cu's LEAN forms): the generic entries' results for the launches they
# take; a launch outside them traps on the GPU, here an error naming what was wrong.
def _lean_check(entry: str, K: int, rows: int | None = None, *ptrs: tuple[int, int], threads: int = 0) -> None:
    """rows: the one-row entries' count (None: any); threads: their block, whose register RMSNorm
    reaches K <= 16 x threads (0: no norm)."""
    if K % 8:
        raise ValueError(f"{entry} needs K % 8 == 0, got K={K}; launch it via fixedgraph.ops.gemv")
    if rows is not None and rows != 1:
        raise ValueError(f"{entry} takes one row, got {rows}; launch it via fixedgraph.ops.gemv")
    if threads and K > 16 * threads:
        raise ValueError(f"{entry}: K={K} > 16 x {threads} threads (the register RMSNorm's reach)")
    for addr, n in ptrs:
        if addr % n:
            raise ValueError(f"{entry}: a pointer is not {n}-byte aligned; launch it via fixedgraph.ops.gemv")


@twin("gemv_bf16_vec")
def gemv_bf16_vec(mem, grid, block, out, x, w, bias, rows, N, K, split):
    _lean_check("gemv_bf16_vec", K, None, (x, 16), (w, 16))
    gemv_bf16(mem, grid, block, out, x, w, bias, rows, N, K, split)



@twin("gemv_rmsnorm_bf16_row")
def gemv_rmsnorm_bf16_row(mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, split,
                          eps, mode):
    if mode & ~3:
        raise ValueError(f"gemv_rmsnorm_bf16_row: mode {mode} (bit 0: SiLU pairs, bit 1: signal late)")
    _lean_check("gemv_rmsnorm_bf16_row", K, rows, (hidden_in, 16), (hidden_out, 16), (delta, 8), (norm_w, 8), (w, 16),
                threads=block[0])
    (gemv_rmsnorm_silu_bf16 if mode & 1 else gemv_rmsnorm_bf16)(mem, grid, block, out, hidden_in, delta, hidden_out,
                                                               norm_w, w, bias, rows, N, K, split, eps)


def _row_deferred(entry, mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, split,
                  eps, mode):
    # gemv_rmsnorm_bf16_row's launch rules and mode bits, the norm deferred: x = bf16(norm_w * h),
    # out = (x @ w.T) / rms(h) (+ bias) (mode bit 0: gate and up so, then silu_mul)
    if mode & ~3:
        raise ValueError(f"{entry}: mode {mode} (bit 0: SiLU pairs, bit 1: signal late)")
    _lean_check(entry, K, rows, (hidden_in, 16), (hidden_out, 16), (delta, 8), (norm_w, 8), (w, 16), threads=block[0])
    _check_block(entry, block)
    silu = bool(mode & 1)
    if silu and N % 2:
        return  # the kernel refuses an odd N and writes nothing
    _gemv_rmsnorm(mem, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, eps, False, silu=silu,
                  defer=True)


@twin("gemv_rmsnorm_bf16_row_dn")
def gemv_rmsnorm_bf16_row_dn(mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K,
                             split, eps, mode):
    _row_deferred("gemv_rmsnorm_bf16_row_dn", mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias,
                  rows, N, K, split, eps, mode)


@twin("gemv_rmsnorm_bf16_row_dw")
def gemv_rmsnorm_bf16_row_dw(mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K,
                             split, eps, mode):
    # _dn's results (the slices' sums of squares added in another order); a warp's k slice is at
    # most 8 k32 blocks (the kernel traps past that; the launcher's row_warp_fits)
    warps = block[0] // 32
    if not (1 <= split <= warps and split & (split - 1) == 0 and -(-K // 32) <= 8 * split):
        raise ValueError(f"gemv_rmsnorm_bf16_row_dw: K={K} at split {split} puts more than 8 k32 blocks in a warp's "
                         "slice; launch it via fixedgraph.ops.gemv (FIXEDGRAPH_NORM_DEFER=2 takes _dn there)")
    _row_deferred("gemv_rmsnorm_bf16_row_dw", mem, grid, block, out, hidden_in, delta, hidden_out, norm_w, w, bias,
                  rows, N, K, split, eps, mode)

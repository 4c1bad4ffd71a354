"""A Linear layer, out = x @ W.T (+ bias): GEMV for decode-sized batches, GEMM above."""
from __future__ import annotations

from fixedgraph.ops.gemm import gemm
from fixedgraph.ops.gemv import MAX_ROWS, gemv
from fixedgraph.program import Arg, Program


def linear(prog: Program, out: Arg, x: Arg, w: Arg, bias: Arg | None, rows: int, N: int, K: int,
           out_f32: bool = False, label: str = "") -> int:
    """out[r, n] = sum_k x[r, k] * w[n, k] (+ bias[n]); one launch, returns its op index.

    out: [rows, N] bf16, or f32 when ``out_f32``; written.
    x: [rows, K] bf16. w: [N, K] bf16 (PyTorch Linear layout). bias: [N] bf16 or None.
    rows <= 8 streams W once through the GEMV; more rows use the tensor-core GEMM.
    """
    op = gemv if rows <= MAX_ROWS else gemm
    return op(prog, out, x, w, bias, rows, N, K, out_f32=out_f32, label=label)

"""Launchers of ptx/src/embed_norm.cu: the token embedding gather and residual add + RMSNorm.

Neither kernel needs scratch memory.
"""
from __future__ import annotations

from fixedgraph.program import Arg, Null, Program


def _ptr(a: Arg | None) -> Arg:
    return Null() if a is None else a


def _block(n: int, per_thread: int, lo: int, hi: int) -> int:
    """Threads for n work items at about per_thread each: a multiple of 32 in [lo, hi]."""
    want = -(-n // per_thread)
    return max(lo, min(hi, -(-want // 32) * 32))


def embed_gather(prog: Program, hidden: Arg, table: Arg, tokens: Arg, rows: int, H: int, V: int,
                 label: str = "embed") -> int:
    """hidden[r] = float(table[tokens[r]]); a token outside [0, V) fills its row with NaN.

    hidden: [rows, H] f32, written. table: [V, H] bf16. tokens: [rows] i32.
    Returns the launch's op index.
    """
    if rows < 1 or H < 1 or V < 1:
        raise ValueError(f"embed_gather needs rows, H, V >= 1; got rows={rows}, H={H}, V={V}")
    vecs = H // 8 if H % 8 == 0 else H  # the kernel moves 8 bf16 at a time when it can
    block = _block(vecs, 1, 32, 512)
    return prog.launch("embed_gather", (rows, 1, 1), (block, 1, 1),
                       (hidden, table, tokens, int(H), int(V)), label=label)


def add_rmsnorm(prog: Program, hidden: Arg, delta: Arg | None, weight: Arg, out: Arg, rows: int,
                H: int, eps: float, label: str = "add_rmsnorm") -> int:
    """Residual add then RMSNorm, HF LlamaRMSNorm rounding.

    If delta is given: hidden += float(delta) in place (fp32). Then
    out = bf16(weight * bf16(hidden * rsqrt(mean(hidden^2) + eps))).
    hidden: [rows, H] f32, read and (with delta) written. delta: [rows, H] bf16 or None.
    weight: [H] bf16. out: [rows, H] bf16, written. Any H (16-byte paths when H % 4 == 0);
    H <= 16384 keeps every row in registers, wider rows re-read hidden. Returns the op index.
    """
    if rows < 1 or H < 1:
        raise ValueError(f"add_rmsnorm needs rows, H >= 1; got rows={rows}, H={H}")
    if not eps > 0:
        raise ValueError(f"add_rmsnorm eps must be > 0, got {eps}")
    vecs = H // 4 if H % 4 == 0 else H
    block = _block(vecs, 4, 64, 1024)  # the kernel caches up to 8 vectors a thread
    return prog.launch("add_rmsnorm", (rows, 1, 1), (block, 1, 1),
                       (hidden, _ptr(delta), weight, out, int(H), float(eps)), label=label)

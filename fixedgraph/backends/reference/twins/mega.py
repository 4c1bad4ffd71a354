"""Numpy twin of ptx/src/mega.cu: decode_mega, a batch-1 greedy decode step in one launch.

It reads the same op table (fixedgraph/ops/mega.py) and keeps the same LL words (epoch << 32 |
f32 bits), so a word the kernel would wait on forever is an error here. Each op rounds where the
decode graph's kernels round (the twins of gemv_rmsnorm, qk_norm_rope_kv, the split attention and
silu_mul); summation orders are numpy's.
"""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin
from fixedgraph.backends.reference.twins.attention import _gather_kv, _rotate_half, _split_softmax
from fixedgraph.backends.reference.twins.embed_norm import rms_norm_bf16
from fixedgraph.backends.reference.twins.gemv import silu_mul_f32
from fixedgraph.ops.mega import (HDR, MK_ATTN, MK_HEAD, MK_MERGE, MK_ORES, MK_PICK, MK_QKV, MK_SILU,
                                 NONE, OPW, FLAG_RES_PLAIN, FLAG_X_PLAIN)


class _Step:
    """One launch's view of the arena: addresses from table offsets, LL words of this epoch."""

    def __init__(self, mem, base: int, hdr: np.ndarray) -> None:
        self.mem, self.base, self.hdr = mem, base, hdr
        self.epoch = int(self.view(hdr[1], np.uint32, 1)[0])

    def addr(self, off: int, byte: int = 0) -> int:
        if int(off) == NONE:
            raise ValueError("decode_mega: the table names no address where the op needs one")
        return self.base + 16 * int(off) + byte

    def view(self, off: int, dtype, count: int, byte: int = 0) -> np.ndarray:
        return self.mem.view(self.addr(off, byte), dtype, count)

    def bf16(self, off: int, count: int) -> np.ndarray:
        return bf16.to_f32(self.view(off, np.uint16, count))

    def put(self, off: int, values: np.ndarray, at: int = 0) -> None:
        v = np.ascontiguousarray(values, np.float32).ravel()
        self.view(off, np.uint64, v.size, 8 * at)[:] = (np.uint64(self.epoch) << np.uint64(32)) | v.view(np.uint32)

    def get(self, off: int, count: int, what: str, at: int = 0) -> np.ndarray:
        w = self.view(off, np.uint64, count, 8 * at)
        stale = (w >> np.uint64(32)) != np.uint64(self.epoch)
        if stale.any():
            raise ValueError(f"decode_mega: {what} reads {int(stale.sum())} of {count} words that no op wrote in "
                             f"this step (epoch {self.epoch}): the kernel would wait on them until it traps")
        return (w & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32)

    def meta(self, field: int, dtype, count: int = 1) -> np.ndarray:
        return self.view(self.hdr[2], dtype, count, int(self.hdr[field]))

    def splits(self) -> tuple[int, int, int]:
        """(n keys, S splits, keys a split) of this step's attention."""
        n = int(self.meta(5, np.int32)[0])
        h = self.hdr
        S = 1 if n <= 0 else min(int(h[15]), max(1, -(-n // int(h[16]))))
        return n, S, (-(-n // S) if n > 0 else 0)


def _normed(st: _Step, op: np.ndarray, H: int, eps: float, what: str) -> np.ndarray:
    h = st.view(op[4], np.float32, H).copy() if op[9] & FLAG_X_PLAIN else st.get(op[4], H, what)
    return rms_norm_bf16(h[None], st.bf16(op[5], H), eps)[0]


def _weights(st: _Step, op: np.ndarray, rows: int) -> np.ndarray:
    return st.bf16(op[3], rows * int(op[2])).reshape(rows, int(op[2]))


def _attention(st: _Step, op: np.ndarray, G_ctas: int) -> None:
    h = st.hdr
    Hq, Hkv, D, bs = int(h[10]), int(h[11]), int(h[12]), int(h[8])
    eps, scale = float(h[13:14].view(np.float32)[0]), np.float32(h[14:15].view(np.float32)[0])
    G, smax = Hq // Hkv, int(h[15])
    n, S, kps = st.splits()
    pos = int(st.meta(3, np.uint32)[0])
    slot = int(st.meta(4, np.int64)[0])
    qkv = st.get(op[4], (Hq + 2 * Hkv) * D, "the attention's q / k / v").reshape(-1, D)
    cs = st.view(h[17], np.float32, D, 4 * pos * D).reshape(D // 2, 2)
    cos, sin = cs[:, 0], cs[:, 1]
    q, k, v = qkv[:Hq], qkv[Hq:Hq + Hkv], qkv[Hq + Hkv:]
    if op[5] != NONE:
        q = rms_norm_bf16(q, st.bf16(op[5], D), eps)
    if op[6] != NONE:
        k = rms_norm_bf16(k, st.bf16(op[6], D), eps)
    q, k = bf16.round_f32(_rotate_half(q, cos, sin)), bf16.round_f32(_rotate_half(k, cos, sin))
    kp = st.addr(op[10])
    vp = st.addr(op[11])
    if Hkv * S > G_ctas:
        raise ValueError(f"decode_mega: {Hkv} kv heads x {S} splits exceed the grid's {G_ctas} CTAs")
    if n > 0:  # [Hkv, n, D], gathered before this step's key is written
        K, V = _gather_kv(st.mem, kp, vp, st.meta(6, np.int32, int(h[9])), n, bs, Hkv, D)
    if slot >= 0 and n >= 1:  # the new key and value: into the pools, and in place of key n - 1
        top = (slot + 1) * Hkv * D
        st.mem.view(kp, np.uint16, top).reshape(-1, Hkv, D)[slot] = bf16.from_f32(k)
        st.mem.view(vp, np.uint16, top).reshape(-1, Hkv, D)[slot] = bf16.from_f32(v)
        K[:, n - 1], V[:, n - 1] = k, v
    qg = q.reshape(Hkv, G, D)
    for s in range(S):  # item (g, s) of every kv head g at once
        k0, k1 = min(n, s * kps), min(n, s * kps + kps)
        if k1 > k0:
            o, m, l = _split_softmax((qg @ K[:, k0:k1].transpose(0, 2, 1)) * scale, V[:, k0:k1])
        else:
            o, m, l = (np.zeros((Hkv, G, D), np.float32), np.full((Hkv, G), -np.inf, np.float32),
                       np.zeros((Hkv, G), np.float32))
        if S == 1:
            st.put(op[8], bf16.round_f32(o))
            continue
        parts = np.concatenate([m[..., None], l[..., None], o], axis=-1).reshape(Hq, D + 2)
        for hq in range(Hq):
            st.put(op[7], parts[hq], at=(hq * smax + s) * (D + 2))


def _merge(st: _Step, op: np.ndarray) -> None:
    h = st.hdr
    Hq, D, smax = int(h[10]), int(h[12]), int(h[15])
    n, S, kps = st.splits()
    if S == 1:
        return
    used = -(-n // kps)
    out = np.zeros((Hq, D), np.float32)
    for hq in range(Hq):
        parts = np.stack([st.get(op[4], D + 2, "the split merge", at=(hq * smax + s) * (D + 2)) for s in range(used)])
        m, l, o = parts[:, 0], parts[:, 1], parts[:, 2:]
        M = m.max()
        w = np.zeros_like(l) if M == -np.inf else l * np.exp(m - M)
        L = w.sum()
        out[hq] = (w @ o) / L if L > 0 else 0.0
    st.put(op[7], bf16.round_f32(out))


def _argmax_keys(logits: np.ndarray) -> np.ndarray:
    """mega.cu's argmax_key: the larger wins, NaN below every number, ties to the lower index."""
    u = logits.view(np.uint32).astype(np.uint64)
    key = np.where(u & np.uint64(0x80000000), ~u & np.uint64(0xFFFFFFFF), u | np.uint64(0x80000000))
    key = np.where(np.isnan(logits), np.uint64(0), key)
    return key << np.uint64(32) | (np.uint64(0xFFFFFFFF) - np.arange(logits.size, dtype=np.uint64))


@twin("decode_mega")
def decode_mega(mem, grid, block, base, table, ring, slot):
    G_ctas, cw = grid[0], block[0] // 32 - 1
    if block[0] % 32 or not 1 <= cw <= 15 or slot % 16 or slot <= 0:
        raise ValueError(f"decode_mega: block {block[0]} (1-15 compute warps + 1 loader) and stage bytes {slot} "
                         "(a positive multiple of 16); launch it via fixedgraph.ops.mega")
    hdr = mem.view(table, np.uint32, HDR).copy()
    if hdr[25] < 4 * (HDR + OPW * int(hdr[0])) or hdr[25] % 16:
        raise ValueError(f"decode_mega: header word 25 ({hdr[25]}) must be the table's bytes (a multiple of 16 "
                         f"holding its {int(hdr[0])} ops)")
    ops = mem.view(table + 4 * HDR, np.uint32, OPW * int(hdr[0])).reshape(-1, OPW).copy()
    st = _Step(mem, base, hdr)
    eps = float(hdr[13:14].view(np.float32)[0])
    for j, op in enumerate(ops):
        kind, N, K = int(op[0]), int(op[1]), int(op[2])
        what = f"op {j}"
        if kind in (MK_QKV, MK_ORES, MK_SILU, MK_HEAD):
            rows = 2 * N if kind == MK_SILU else N
            if 2 * K * (2 if kind == MK_SILU else 1) > slot:
                raise ValueError(f"decode_mega: op {j}'s rows of {2 * K} bytes do not fit a stage of {slot}")
        if kind == MK_QKV:
            y = _normed(st, op, K, eps, what) @ _weights(st, op, N).T
            if op[6] != NONE:
                y = y + st.bf16(op[6], N)
            st.put(op[7], bf16.round_f32(y))
        elif kind == MK_ORES:
            x = st.get(op[4], K, what)
            res = st.view(op[8], np.float32, N).copy() if op[9] & FLAG_RES_PLAIN else st.get(op[8], N, what)
            st.put(op[7], res + bf16.round_f32(x @ _weights(st, op, N).T))
        elif kind == MK_SILU:
            gu = bf16.round_f32(_normed(st, op, K, eps, what) @ _weights(st, op, rows).T)
            st.put(op[7], silu_mul_f32(gu[:N], gu[N:]))
        elif kind == MK_HEAD:
            logits = (_normed(st, op, K, eps, what) @ _weights(st, op, N).T).astype(np.float32)
            st.view(hdr[22], np.float32, N)[:] = logits
            keys = _argmax_keys(logits)
            bests = np.zeros(G_ctas, np.uint64)
            for b in range(G_ctas):  # each CTA's rows [b N / G, (b + 1) N / G)
                r0, r1 = b * N // G_ctas, (b + 1) * N // G_ctas
                if r1 > r0:
                    bests[b] = keys[r0:r1].max()
            words = np.stack([bests >> np.uint64(32), bests & np.uint64(0xFFFFFFFF)], axis=1).astype(np.uint32)
            st.put(op[7], words.view(np.float32))
        elif kind == MK_ATTN:
            _attention(st, op, G_ctas)
        elif kind == MK_MERGE:
            _merge(st, op)
        elif kind == MK_PICK:
            w = st.get(op[4], 2 * G_ctas, what).view(np.uint32).reshape(G_ctas, 2).astype(np.uint64)
            best = (w[:, 0] << np.uint64(32) | w[:, 1]).max()
            tok = int(np.uint64(0xFFFFFFFF) - (best & np.uint64(0xFFFFFFFF)))
            st.view(hdr[23], np.int32, 1)[0] = tok
            ring_len = int(hdr[18])
            if ring and ring_len:
                step = int(st.meta(7, np.uint32)[0])
                mem.view(ring, np.int32, ring_len)[step % ring_len] = tok
        else:
            raise ValueError(f"decode_mega: op {j} has unknown kind {kind}")


__all__ = ["decode_mega"]

"""Twin of ptx/src/sample.cu: penalised, tempered, filtered Gumbel-max sampling per row.

Bit-exact with the kernel in everything but `exp`/`log` (numpy's f32 and CUDA's `expf`/`logf`
may differ by an ulp), so CPU and GPU pick the same token except in floating-point near-ties:
z, the filter keys, top-k, the counter-based uniforms and the integer top-p masses are the same
bits on both sides. The kernel finds thresholds by radix selection; here a partition/sort of the
(few) candidates gives the same thresholds.
"""
from __future__ import annotations

import numpy as np

from fixedgraph.backends.reference.twins import twin

PARAM_WORDS = 8
GOLDEN = 0x9E3779B97F4A7C15
MASK64 = (1 << 64) - 1
MASS_SCALE = np.float32(2.0**40)  # top-p masses: p / p_max in 2^-40 fixed point
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def mix64(z: np.ndarray) -> np.ndarray:
    """SplitMix64's output function on a uint64 array (wrapping arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def stream_origin(seed_lo: int, seed_hi: int, step: int) -> int:
    """Counter origin of (seed, step); token i's state is origin + i * GOLDEN (mod 2^64)."""
    seed = np.array([(seed_hi << 32) | seed_lo], dtype=np.uint64)
    return (int(mix64(seed)[0]) + ((step << 32) * GOLDEN)) & MASK64


def uniforms(seed_lo: int, seed_hi: int, step: int, idx: np.ndarray) -> np.ndarray:
    """u_i = (2k + 1) / 2^24 (f32, in (0, 1)), k = the top 23 bits of mix64(state_i)."""
    state = np.uint64(stream_origin(seed_lo, seed_hi, step)) + idx.astype(np.uint64) * np.uint64(GOLDEN)
    k = mix64(state) >> np.uint64(41)
    return (k * np.uint64(2) + np.uint64(1)).astype(np.float32) * np.float32(2.0**-24)


def float_key(z: np.ndarray) -> np.ndarray:
    """Order-preserving uint32 key of f32 values, -0 folded onto +0."""
    u = np.ascontiguousarray(z, dtype=np.float32).view(np.uint32).copy()
    u[u == 0x80000000] = 0
    return np.where(u & np.uint32(0x80000000), ~u, u | np.uint32(0x80000000))


def seen_mask(words: np.ndarray, V: int) -> np.ndarray:
    """bool [V] from a [ceil(V/32)] uint32 bitmask (bit i % 32 of word i // 32)."""
    return np.unpackbits(words.astype("<u4").view(np.uint8), bitorder="little")[:V].astype(bool)


def _top_p_threshold(key: np.ndarray, z: np.ndarray, m: np.float32, top_p: float) -> int:
    """Smallest key kept by top-p among `key`/`z` (the top-k survivors), as the kernel rules."""
    e = np.exp(z - m)  # f32, like expf(z - m)
    w = (e * MASS_SCALE).astype(np.uint64)
    total = int(w.sum(dtype=np.uint64))
    need = max(1, int(float(max(top_p, 0.0)) * float(total)))
    # Zero-mass tokens never hold the threshold: top_p <= 1 - 2^-24 and total >= 2^40 (the max
    # has mass 2^40), so need <= total - 2^16 is reached at a key with positive mass.
    pos = w > 0
    kk, ww = key[pos], w[pos]
    order = np.argsort(kk, kind="stable")[::-1]  # descending keys
    kk, ww = kk[order], ww[order]
    starts = np.r_[0, np.flatnonzero(kk[1:] != kk[:-1]) + 1]  # one group per distinct key
    group_keys, group_mass = kk[starts], np.add.reduceat(ww, starts)
    cum = np.cumsum(group_mass, dtype=np.uint64)
    j = int(np.searchsorted(cum, np.uint64(need), side="left"))  # first cum >= need
    return int(group_keys[min(j, len(group_keys) - 1)])


def sample_row(x: np.ndarray, p: np.ndarray, seen: np.ndarray | None) -> int:
    """The token the kernel picks for one row. x: [V] f32 logits; p: [8] uint32 words."""
    V = x.shape[0]
    temp, top_p, min_p, rp = p[:4].view(np.float32)
    top_k, seed_lo, seed_hi, step = int(p[4].view(np.int32)), int(p[5]), int(p[6]), int(p[7])
    x = x.astype(np.float32, copy=True)
    if seen is not None and rp != np.float32(1):
        s = seen_mask(seen, V)
        with np.errstate(all="ignore"):
            x[s] = np.where(x[s] < 0, x[s] * rp, x[s] / rp)
    with np.errstate(all="ignore"):
        inv = np.float32(1) / temp if temp > 0 else np.float32(np.inf)
    greedy = not (temp > 0) or np.isinf(inv)
    with np.errstate(all="ignore"):
        z = x * (np.float32(1) if greedy else inv)
    z[np.isnan(z)] = -np.inf
    amax = int(np.argmax(z))  # first maximum: ties go to the lowest index
    m = z[amax]
    if greedy or not np.isfinite(m):
        return amax
    key = float_key(z)
    keep = np.ones(V, dtype=bool)
    if 0 < top_k < V:
        keep = key >= np.partition(key, V - top_k)[V - top_k]  # k-th largest key, ties kept
    if top_p < np.float32(1):
        keep &= key >= _top_p_threshold(key[keep], z[keep], m, float(top_p))
    cand = np.flatnonzero(keep)
    if min_p > 0:
        with np.errstate(under="ignore"):
            ok = (np.exp(z[cand] - m) >= min_p) | (z[cand] == m)
        cand = cand[ok]
    g = -np.log(-np.log(uniforms(seed_lo, seed_hi, step, cand)))  # f32 Gumbel noise
    return int(cand[np.argmax(z[cand] + g)])  # cand ascending: ties go to the lowest index


@twin("sample_rows")
def sample_rows(mem, grid, block, tokens, ring, step, ring_len, logits, params, seen, rows, V):
    if tuple(block) != (1024, 1, 1):
        raise ValueError(f"sample_rows needs 1024-thread blocks, got {block}")
    if rows == 0 or V == 0:
        return
    words = (V + 31) // 32
    x = mem.view(logits, np.float32, rows * V).reshape(rows, V)
    p = mem.view(params, np.uint32, rows * PARAM_WORDS).reshape(rows, PARAM_WORDS)
    bits = mem.view(seen, np.uint32, rows * words).reshape(rows, words) if seen else None
    out = np.array([sample_row(x[r], p[r], None if bits is None else bits[r]) for r in range(rows)],
                   dtype=np.int64)
    mem.view(tokens, np.int32, rows)[:] = out
    if ring and ring_len:
        slot = (int(mem.view(step, np.uint32, 1)[0]) if step else 0) % ring_len
        mem.view(ring + 4 * slot * rows, np.int32, rows)[:] = out
    if bits is not None:
        np.bitwise_or.at(bits, (np.arange(rows), out >> 5), (np.uint32(1) << (out & 31).astype(np.uint32)))

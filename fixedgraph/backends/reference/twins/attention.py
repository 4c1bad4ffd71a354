"""Numpy twins of ptx/src/attention.cu: paged decode (split-K, merged in the same launch), the
same with QK-norm + RoPE + the KV write folded in, the legacy split combine, and causal prefill.

KV pools are bf16 [num_blocks, block_size, Hkv, D]; token t of a sequence lives in block
``block_table[t // block_size]`` at offset ``t % block_size``. Math is float32 like the kernels
(decode's tensor-core P.V carries P as bf16 hi + lo, close enough to fp32 to count as unrounded);
the prefill twin rounds P to bf16 before P.V (the kernel's tensor-core MMA does) while l sums
unrounded P. Only the blocks a sequence's valid keys use are gathered, so unwritten pool slots
(which may hold NaN) never reach the result, as on the GPU.
"""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin
from fixedgraph.backends.reference.twins.embed_norm import rms_norm_bf16

DECODE_DIMS = (64, 96, 128, 256)
DECODE_ROPE_DIMS = (64, 96, 128)  # the tensor-core body only
PREFILL_DIMS = (64, 96, 128)
_TILE_KEYS = 64  # keys a K/V tile of the tensor-core decode body (attention_decode.cuh kDecTileKeys)
_PREFILL_ROWS = 256  # query tokens per numpy step: bounds the [tokens, G, keys] score block


def _gather_kv(mem, k_pool: int, v_pool: int, blocks: np.ndarray, n_keys: int, block_size: int,
               Hkv: int, D: int) -> tuple[np.ndarray, np.ndarray]:
    """K, V of keys 0..n_keys-1 through ``blocks`` (i32 block ids): float32 [Hkv, n_keys, D]."""
    blocks = blocks[: -(-n_keys // block_size)].astype(np.int64)
    per_block = block_size * Hkv * D
    count = (int(blocks.max()) + 1) * per_block  # view only as far as the highest block used
    out = []
    for pool in (k_pool, v_pool):
        p = mem.view(pool, np.uint16, count).reshape(-1, block_size, Hkv, D)
        x = p[blocks].reshape(-1, Hkv, D)[:n_keys]
        out.append(bf16.to_f32(x).transpose(1, 0, 2))
    return out[0], out[1]


def _split_softmax(s: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scores s [Hkv, G, n] (scaled) and v [Hkv, n, D] -> (o normalised, max m, sum l)."""
    m = s.max(axis=-1)
    p = np.exp(s - m[..., None])
    l = p.sum(axis=-1)
    o = np.matmul(p, v) / l[..., None]
    return o, m, l


def _split_keys(n: int, S: int, block_size: int) -> tuple[int, int]:
    """(keys per split, splits holding keys) of a row of n keys: the kernels' split layout."""
    if n <= 0:
        return 0, 0
    kps = -(-(-(-n // S)) // block_size) * block_size  # ceil(n / S) rounded up to whole blocks
    return kps, -(-n // kps)


def _attend(mem, entry: str, out, o_part, ml_part, counters, qf: np.ndarray, k_pool, v_pool,
            block_table, seq_len, rows, max_blocks, block_size, Hq, Hkv, D, S, scale,
            current: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None, steal: bool = False) -> None:
    """Split-K decode of q ``qf`` (float32 [rows, Hkv, G, D]) over the pools, merged into ``out``.

    ``current`` (k, v float32 [rows, Hkv, D], take bool [rows]): rows with take[r] use k[r], v[r]
    as key seq_len[r] - 1 instead of the pools' contents (the fused RoPE entries).
    ``steal`` (the ``_st`` entries): the tile counters after the arrival counters must be 0 too;
    the result is one softmax over the keys and the partials are left as they are (which tiles a
    split takes is decided at run time: only ``out`` is defined).
    """
    G = Hq // Hkv
    bt = mem.view(block_table, np.int32, rows * max_blocks).reshape(rows, max_blocks)
    lens = np.clip(mem.view(seq_len, np.int32, rows).astype(np.int64), 0, max_blocks * block_size)
    res = np.zeros((rows, Hkv, G, D), np.float32)
    if S > 1:
        ctr = mem.view(counters, np.uint32, (2 if steal else 1) * rows * Hkv).reshape(-1, rows, Hkv).transpose(1, 0, 2)
        o_view = mem.view(o_part, np.float32, rows * Hq * S * D).reshape(rows, Hkv, G, S, D)
        ml_view = mem.view(ml_part, np.float32, rows * Hq * S * 2).reshape(rows, Hkv, G, S, 2)
    for r in range(rows):
        n = int(lens[r])
        kps, used = _split_keys(n, S, block_size)
        if steal:  # min(S, tiles) splits hold tiles; the result is all that is defined
            used = min(S, -(-n // _TILE_KEYS)) if n > 0 else 0
        if used == 0:
            continue
        if used > 1 and ctr[r].any():
            raise ValueError(
                f"{entry}: arrival counters of row {r} are {ctr[r].tolist()}, not 0: the counter "
                f"scratch region must be zeroed once at boot (the kernel leaves it at 0 after every "
                f"launch)")
        kf, vf = _gather_kv(mem, k_pool, v_pool, bt[r], n, block_size, Hkv, D)
        if current is not None and current[2][r]:
            kf[:, n - 1], vf[:, n - 1] = current[0][r], current[1][r]
        s = np.matmul(qf[r], kf.transpose(0, 2, 1)) * np.float32(scale)  # [Hkv, G, n]
        if steal:
            res[r] = _split_softmax(s, vf)[0]
            continue
        parts = [_split_softmax(s[..., a : a + kps], vf[:, a : a + kps]) for a in range(0, n, kps)]
        o = np.stack([p[0] for p in parts], axis=2)  # [Hkv, G, used, D]
        m = np.stack([p[1] for p in parts], axis=2)  # [Hkv, G, used]
        l = np.stack([p[2] for p in parts], axis=2)
        if used == 1:
            res[r] = o[:, :, 0]
            continue
        # What the splits leave in scratch (m in natural-log units), then the last arrival's merge.
        o_view[r, :, :, :used] = o
        ml_view[r, :, :, :used] = np.stack([m, l], axis=-1)
        w = l * np.exp(m - m.max(axis=-1, keepdims=True))
        res[r] = np.einsum("kgs,kgsd->kgd", w, o) / w.sum(axis=-1)[..., None]
    mem.view(out, np.uint16, rows * Hq * D)[:] = bf16.from_f32(res.reshape(-1))


def _decode(D_entry: int, name: str = "", steal: bool = False):
    def run(mem, grid, block, out, o_part, ml_part, counters, q, k_pool, v_pool, block_table,
            seq_len, rows, max_blocks, block_size, Hq, Hkv, D, num_splits, scale):
        entry = f"paged_attention_decode{name}_d{D_entry}"
        if D != D_entry or Hkv < 1 or Hq % Hkv:
            raise ValueError(f"{entry}: D={D}, Hq={Hq}, Hkv={Hkv}")
        qf = bf16.to_f32(mem.view(q, np.uint16, rows * Hq * D)).reshape(rows, Hkv, Hq // Hkv, D)
        if steal and Hq // Hkv > 16:
            raise ValueError(f"{entry}: a GQA group of {Hq // Hkv} heads (one pass of at most 16)")
        _attend(mem, entry, out, o_part, ml_part, counters, qf, k_pool, v_pool, block_table, seq_len,
                rows, max_blocks, block_size, Hq, Hkv, D, num_splits, scale, steal=steal)

    run.__name__ = f"paged_attention_decode{name}_d{D_entry}"
    return run


for _d in DECODE_DIMS:
    twin(f"paged_attention_decode_d{_d}")(_decode(_d))
# query heads on the MMA's N (the _sw entry): the same results
twin("paged_attention_decode_sw_d128")(_decode(128, "_sw"))
# tiles shared out at run time (the _st entry): the same results
twin("paged_attention_decode_st_d128")(_decode(128, "_st", steal=True))


def _rotate_half(x: np.ndarray, cos: np.ndarray, sin: np.ndarray) -> np.ndarray:
    """RoPE with pairs (i, i + D/2) in float32, every product and sum rounded (the unfused ops)."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], axis=-1)


def _decode_rope(D_entry: int, name: str = "", steal: bool = False):
    def run(mem, grid, block, out, o_part, ml_part, counters, qkv, q_norm, k_norm, rope, positions,
            slots, k_pool, v_pool, block_table, seq_len, rows, max_blocks, block_size, Hq, Hkv, D,
            num_splits, scale, eps):
        entry = f"paged_attention_decode_rope{name}_d{D_entry}"
        if D != D_entry or Hkv < 1 or Hq % Hkv:
            raise ValueError(f"{entry}: D={D}, Hq={Hq}, Hkv={Hkv}")
        if steal and Hq // Hkv > 8:
            raise ValueError(f"{entry}: a GQA group of {Hq // Hkv} heads (one pass of at most 8)")
        if any(a % 16 for a in (qkv, q_norm, k_norm, rope, k_pool, v_pool)):
            raise ValueError(f"{entry}: qkv, norms, rope and pools must be 16-byte aligned")
        # qk_norm_rope_kv: q and k normed (optionally) and rotated in float32, stored bf16.
        raw = mem.view(qkv, np.uint16, rows * (Hq + 2 * Hkv) * D).reshape(rows, -1, D)  # bf16 bits
        x = bf16.to_f32(raw)
        pos = mem.view(positions, np.uint32, rows).astype(np.int64)
        table = mem.view(rope, np.float32, (int(pos.max()) + 1) * D).reshape(-1, D // 2, 2)
        cos, sin = table[pos, :, 0][:, None, :], table[pos, :, 1][:, None, :]  # [rows, 1, D/2]
        q, k = x[:, :Hq], x[:, Hq:Hq + Hkv]
        if q_norm:
            q = rms_norm_bf16(q, bf16.to_f32(mem.view(q_norm, np.uint16, D)), eps)
        if k_norm:
            k = rms_norm_bf16(k, bf16.to_f32(mem.view(k_norm, np.uint16, D)), eps)
        q = bf16.round_f32(_rotate_half(q, cos, sin))  # [rows, Hq, D]: the CTA's s_q
        k_bits = bf16.from_f32(_rotate_half(k, cos, sin))  # [rows, Hkv, D]
        v_bits = raw[:, Hq + Hkv:]
        # The KV write of the owning CTA of each (row, kv head); a negative slot writes nothing.
        slot = mem.view(slots, np.int64, rows)
        live = slot >= 0
        if live.any():
            n_slots = int(slot[live].max()) + 1
            mem.view(k_pool, np.uint16, n_slots * Hkv * D).reshape(n_slots, Hkv, D)[slot[live]] = k_bits[live]
            mem.view(v_pool, np.uint16, n_slots * Hkv * D).reshape(n_slots, Hkv, D)[slot[live]] = v_bits[live]
        # Key seq_len - 1 comes from the CTA, not the pool, for rows that wrote it and attend it.
        seq = mem.view(seq_len, np.int32, rows).astype(np.int64)
        take = live & (seq >= 1) & (seq <= max_blocks * block_size)
        current = (bf16.to_f32(k_bits), bf16.to_f32(v_bits), take)
        _attend(mem, entry, out, o_part, ml_part, counters, q.reshape(rows, Hkv, Hq // Hkv, D), k_pool,
                v_pool, block_table, seq_len, rows, max_blocks, block_size, Hq, Hkv, D, num_splits,
                scale, current, steal=steal)

    run.__name__ = f"paged_attention_decode_rope{name}_d{D_entry}"
    return run


for _d in DECODE_ROPE_DIMS:
    twin(f"paged_attention_decode_rope_d{_d}")(_decode_rope(_d))
# the long-context form: the same results (its merge loads more partials a round)
twin("paged_attention_decode_rope_long_d128")(_decode_rope(128, "_long"))
# query heads on the MMA's N (the _sw entries): the same results
for _d in DECODE_ROPE_DIMS:
    twin(f"paged_attention_decode_rope_sw_d{_d}")(_decode_rope(_d, "_sw"))
twin("paged_attention_decode_rope_long_sw_d128")(_decode_rope(128, "_long_sw"))
# the same code holding idle registers (_swp): the same results
for _d in DECODE_ROPE_DIMS:
    twin(f"paged_attention_decode_rope_swp_d{_d}")(_decode_rope(_d, "_swp"))
twin("paged_attention_decode_rope_long_swp_d128")(_decode_rope(128, "_long_swp"))
# tiles shared out at run time (the _long_st and _st entries): the same results
twin("paged_attention_decode_rope_long_st_d128")(_decode_rope(128, "_long_st", steal=True))
for _d in DECODE_ROPE_DIMS:
    twin(f"paged_attention_decode_rope_st_d{_d}")(_decode_rope(_d, "_st", steal=True))


@twin("paged_attention_combine")
def paged_attention_combine(mem, grid, block, out, o_part, ml_part, rows, Hq, D, num_splits):
    S = num_splits
    o = mem.view(o_part, np.float32, rows * Hq * S * D).reshape(rows, Hq, S, D)
    ml = mem.view(ml_part, np.float32, rows * Hq * S * 2).reshape(rows, Hq, S, 2)
    m, l = ml[..., 0], ml[..., 1]
    M = m.max(axis=-1, keepdims=True)
    Mu = np.where(np.isneginf(M), np.float32(0), M)  # all splits empty: every weight is 0
    w = l * np.exp(m - Mu)  # [rows, Hq, S]
    L = w.sum(axis=-1)
    inv = np.divide(1.0, L, out=np.zeros_like(L), where=L > 0).astype(np.float32)
    res = np.einsum("rhs,rhsd->rhd", w, o) * inv[..., None]
    mem.view(out, np.uint16, rows * Hq * D)[:] = bf16.from_f32(res.reshape(-1))


def _prefill(D_entry: int):
    def run(mem, grid, block, out, q, k_pool, v_pool, block_table, positions, T, max_blocks,
            block_size, Hq, Hkv, D, scale):
        if D != D_entry or Hkv < 1 or Hq % Hkv:
            raise ValueError(f"paged_attention_prefill_d{D_entry}: D={D}, Hq={Hq}, Hkv={Hkv}")
        G, cap = Hq // Hkv, max_blocks * block_size
        pos = np.minimum(mem.view(positions, np.uint32, T).astype(np.int64), cap - 1)
        n = int(pos.max()) + 1 if T and cap else 0
        res = np.zeros((T, Hkv, G, D), np.float32)
        if n > 0:
            bt = mem.view(block_table, np.int32, max_blocks)
            kf, vf = _gather_kv(mem, k_pool, v_pool, bt, n, block_size, Hkv, D)  # [Hkv, n, D]
            qf = bf16.to_f32(mem.view(q, np.uint16, T * Hq * D)).reshape(T, Hkv, G, D)
            keys = np.arange(n)
            for t0 in range(0, T, _PREFILL_ROWS):
                t1 = min(t0 + _PREFILL_ROWS, T)
                qt = qf[t0:t1].transpose(1, 0, 2, 3).reshape(Hkv, -1, D)  # [Hkv, t*G, D]
                s = np.matmul(qt, kf.transpose(0, 2, 1)) * np.float32(scale)  # [Hkv, t*G, n]
                allowed = np.repeat(keys[None, :] <= pos[t0:t1, None], G, axis=0)  # [t*G, n]
                s = np.where(allowed[None], s, -np.inf)
                p = np.exp(s - s.max(axis=-1, keepdims=True))
                o = np.matmul(bf16.round_f32(p), vf) / p.sum(axis=-1, keepdims=True)
                res[t0:t1] = o.reshape(Hkv, t1 - t0, G, D).transpose(1, 0, 2, 3)
        mem.view(out, np.uint16, T * Hq * D)[:] = bf16.from_f32(res.reshape(-1))

    run.__name__ = f"paged_attention_prefill_d{D_entry}"
    return run


for _d in PREFILL_DIMS:
    twin(f"paged_attention_prefill_d{_d}")(_prefill(_d))

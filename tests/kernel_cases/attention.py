"""Kernel cases of the paged attention entries (ptx/src/attention.cu), through fixedgraph.ops.

Pools are filled so that a kernel reading anything it must not shows up as NaN in its output:
every pool slot past a sequence's last valid key holds NaN, and block-table entries past the
sequence point at an all-NaN block. Live blocks are a shuffled, non-contiguous set. The fused
RoPE decode cases also poison each row's current-token slot, which the launch itself must write.
"""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.ops.attention import (SCRATCH_COUNT, SCRATCH_ML, SCRATCH_O, attention_combine,
                                      attention_decode, attention_decode_rope, attention_prefill,
                                      decode_scratch)
from fixedgraph.ops.rope_kv import qk_norm_rope_kv
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison, rand_bf16, run_case

NAN_BF16 = 0x7FC0
DECODE_CHECK = Check(atol=4e-3, rtol=8e-3)  # fp32 softmax; out rounded to bf16
PREFILL_CHECK = Check(atol=1.5e-2, rtol=2e-2)  # P rounded to bf16 for the tensor-core P.V


def _paged_pools(rng, lens: list[int], block_size: int, Hkv: int, D: int, max_blocks: int):
    """Pools and a block table holding len keys per sequence in shuffled blocks.

    Block 0 is the dummy block (random data, for padding rows); the last block is all NaN and
    fills every unused table entry; slots past each sequence's length hold NaN.
    """
    used = [-(-n // block_size) for n in lens]
    nan_block = 1 + sum(used) + 2  # two spare blocks nobody uses
    num_blocks = nan_block + 1
    live = rng.permutation(np.arange(1, nan_block)).astype(np.int32)
    table = np.full((len(lens), max_blocks), nan_block, np.int32)
    k = rand_bf16(rng, (num_blocks, block_size, Hkv, D))
    v = rand_bf16(rng, (num_blocks, block_size, Hkv, D))
    at = 0
    for r, (n, nb) in enumerate(zip(lens, used)):
        table[r, :nb] = live[at : at + nb]
        at += nb
        last = table[r, nb - 1]
        for pool in (k, v):
            pool.data[last, n - (nb - 1) * block_size :] = NAN_BF16
    for pool in (k, v):
        pool.data[nan_block] = NAN_BF16
    return k, v, table


def _gather(pool: np.ndarray, blocks: np.ndarray, n: int, block_size: int) -> np.ndarray:
    """float64 [n, Hkv, D] keys 0..n-1 of a sequence through its block ids."""
    nb = -(-n // block_size)
    return pool[blocks[:nb]].reshape(nb * block_size, *pool.shape[2:])[:n].astype(np.float64)


def _softmax_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, scale: float) -> np.ndarray:
    """q [D], k/v [n, D] float64 -> [D]: plain softmax(q.k * scale) @ v."""
    s = k @ q * scale
    p = np.exp(s - s.max())
    return p @ v / p.sum()


def _split_scratch(buffers: dict, checks: dict, rows: int, Hq: int, Hkv: int, D: int, S: int) -> dict:
    """Add the split scratch of a decode launch to ``buffers`` (counters zero and checked)."""
    scratch = {}
    for region, (shape, dtype) in decode_scratch(rows, Hq, D, S, Hkv).items():
        if region == SCRATCH_COUNT:  # zero at rest, and zero again after the launch
            buffers[region] = Buffer(np.zeros(shape, np.uint32), dtype)
            checks[region] = Check()
        else:  # partials: every byte the merge reads is written by this launch
            buffers[region] = poison(shape, dtype)
        scratch[region] = Ref(region)
    return scratch


def _decode_case(name: str, rng, rows: int, block_size: int, Hq: int, Hkv: int, D: int, S: int,
                 max_len: int = 1500, lens: list[int] | None = None, swap: bool = False,
                 steal: bool = False, twice: bool = False) -> KernelCase:
    """Decode over random or given ``lens``; a len of 0 expects zeros (no keys). ``steal``: the
    tile-sharing entry; ``twice``: a second launch of it into ``out2`` (the counters it takes
    tiles from must be back at 0 after the first)."""
    if lens is None:
        lens = [int(x) for x in rng.integers(1, max_len + 1, rows)]
        lens[0] = block_size * int(rng.integers(1, max_len // block_size + 1))  # a block boundary
    pad = rows >= 5  # the last row is a padding row: seq_len 1 on dummy block 0
    max_blocks = -(-max(lens) // block_size) + 1
    live = lens[:-1] if pad else lens
    k, v, table = _paged_pools(rng, [max(n, 1) for n in live], block_size, Hkv, D, max_blocks)
    if pad:
        lens[-1] = 1
        table = np.vstack([table, np.zeros((1, max_blocks), np.int32)])
    scale = 1.0 / np.sqrt(D)
    buffers = {
        "q": rand_bf16(rng, (rows, Hq * D), scale=1.5),
        "k_pool": k,
        "v_pool": v,
        "block_table": Buffer(table, "i32"),
        "seq_len": Buffer(np.array(lens, np.int32), "i32"),
        "out": poison((rows, Hq * D), "bf16"),
    }
    checks = {"out": DECODE_CHECK}
    if twice:
        buffers["out2"] = poison((rows, Hq * D), "bf16")
        checks["out2"] = DECODE_CHECK
    scratch = _split_scratch(buffers, checks, rows, Hq, Hkv, D, S)
    prog = Program(name)
    for o in ("out", "out2") if twice else ("out",):
        attention_decode(prog, Ref(o), Ref("q"), Ref("k_pool"), Ref("v_pool"), Ref("block_table"),
                         Ref("seq_len"), scratch or None, rows, max_blocks, block_size, Hq, Hkv, D,
                         scale, S, swap=swap, steal=steal)

    def reference(x):
        q = x["q"].reshape(rows, Hq, D).astype(np.float64)
        out = np.zeros((rows, Hq, D))
        for r in range(rows):
            n = int(x["seq_len"][r])
            if n == 0:
                continue
            kk = _gather(x["k_pool"], x["block_table"][r], n, block_size)
            vv = _gather(x["v_pool"], x["block_table"][r], n, block_size)
            for h in range(Hq):
                kvh = h // (Hq // Hkv)
                out[r, h] = _softmax_attention(q[r, h], kk[:, kvh], vv[:, kvh], scale)
        res = {"out": out.reshape(rows, Hq * D)}
        if twice:
            res["out2"] = res["out"]
        if SCRATCH_COUNT in checks:
            res[SCRATCH_COUNT] = np.zeros_like(x[SCRATCH_COUNT])
        return res

    return KernelCase(name, prog, buffers, checks, reference,
                      notes=f"seq_len={lens}, num_splits={S}")


def _split_decode_case(name: str, rng, rows: int, S: int, Hq: int, Hkv: int, D: int) -> KernelCase:
    """seq_len from 1 to past S*block_size: one split, a few, exactly S full ones, all S."""
    bs = 16
    edge = [1, S * bs + 5, S * bs, int(rng.integers(2, 3 * bs))]
    lens = edge[:rows] if rows > 1 else [S * bs + 5]
    return _decode_case(name, rng, rows, bs, Hq, Hkv, D, S, lens=lens)


ROPE_EPS = 1e-6


def _rope_table(max_pos: int, D: int) -> np.ndarray:
    """(cos, sin) of pos * 1e6^(-2i/D): [max_pos, D/2, 2] f32."""
    ang = np.arange(max_pos)[:, None] * 1e6 ** (-np.arange(0, D, 2) / D)[None, :]
    return np.stack([np.cos(ang), np.sin(ang)], axis=-1).astype(np.float32)


def _coarse_bf16(rng, shape) -> Buffer:
    """Multiples of 1/16 below 4 in magnitude: a head's sum of squares is exact in fp32 in any
    order, so the kernel's norm rounds exactly as the numpy twin's (bit-exact pool checks)."""
    x = np.clip(np.round(rng.normal(0, 1.5, shape) * 16), -63, 63) / 16
    return Buffer(bf16.from_f32(x.astype(np.float32)), "bf16")


def _rope_kv_twin(x: dict, rows: int, Hq: int, Hkv: int, D: int, norm: bool) -> dict:
    """k_pool and v_pool as the qk_norm_rope_kv twin leaves them, from the case's input values."""
    from fixedgraph.backends.reference import ReferenceDevice

    names = ("qkv", "rope", "positions", "slots", "k_pool", "v_pool") + (("q_norm", "k_norm") if norm else ())
    dtypes = {"rope": "f32", "positions": "u32", "slots": "i64"}
    bufs = {n: Buffer(x[n] if n in dtypes else bf16.from_f32(x[n]), dtypes.get(n, "bf16")) for n in names}
    bufs["q"] = poison((rows, Hq * D), "bf16")
    prog = Program("qk_norm_rope_kv")
    qk_norm_rope_kv(prog, Ref("qkv"), Ref("q"), Ref("q_norm") if norm else None,
                    Ref("k_norm") if norm else None, Ref("rope"), Ref("positions"), Ref("slots"),
                    Ref("k_pool"), Ref("v_pool"), rows, Hq, Hkv, D, ROPE_EPS)
    case = KernelCase("qk_norm_rope_kv", prog, bufs, {"k_pool": Check(), "v_pool": Check()})
    return run_case(case, ReferenceDevice())


def _rope_case(name: str, rng, rows: int, block_size: int, Hq: int, Hkv: int, D: int, S: int,
               norm: bool, lens: list[int], neg_row: int | None, swap: bool | str = "",
               steal: bool = False) -> KernelCase:
    """Fused QK-norm + RoPE + KV write + decode. Row r's token is key lens[r] - 1 at slot
    slots[r] (the engine's invariant); that pool slot holds NaN before the launch, so a split
    reading it instead of the CTA's own k/v, or a missing write, shows up. Row ``neg_row`` has
    slot -1: no write, and its key lens[r] - 1 (random data) is read from the pool."""
    lens = list(lens)
    bs, heads, G = block_size, Hq + 2 * Hkv, Hq // Hkv
    max_blocks = -(-max(lens) // bs) + 1
    k, v, table = _paged_pools(rng, lens, bs, Hkv, D, max_blocks)
    slots = np.array([table[r, (n - 1) // bs] * bs + (n - 1) % bs for r, n in enumerate(lens)], np.int64)
    for r in range(rows):
        if r == neg_row:
            slots[r] = -1
        else:
            for pool in (k, v):
                pool.data.reshape(-1, Hkv, D)[slots[r]] = NAN_BF16
    max_pos = max(lens) + 3
    scale = 1.0 / np.sqrt(D)
    buffers = {
        "qkv": _coarse_bf16(rng, (rows, heads * D)) if norm else rand_bf16(rng, (rows, heads * D), 1.5),
        "rope": Buffer(_rope_table(max_pos, D), "f32"),
        "positions": Buffer(np.array(lens, np.uint32) - 1, "u32"),
        "slots": Buffer(slots, "i64"),
        "k_pool": k,
        "v_pool": v,
        "block_table": Buffer(table, "i32"),
        "seq_len": Buffer(np.array(lens, np.int32), "i32"),
        "out": poison((rows, Hq * D), "bf16"),
    }
    if norm:
        buffers["q_norm"] = Buffer(bf16.from_f32(1 + 0.3 * rng.standard_normal(D)), "bf16")
        buffers["k_norm"] = Buffer(bf16.from_f32(1 + 0.3 * rng.standard_normal(D)), "bf16")
    # The pools: bit-exact against qk_norm_rope_kv's twin, written slots and untouched ones alike.
    checks = {"out": DECODE_CHECK, "k_pool": Check(), "v_pool": Check()}
    scratch = _split_scratch(buffers, checks, rows, Hq, Hkv, D, S)
    prog = Program(name)
    attention_decode_rope(prog, Ref("out"), Ref("qkv"), Ref("q_norm") if norm else None,
                          Ref("k_norm") if norm else None, Ref("rope"), Ref("positions"), Ref("slots"),
                          Ref("k_pool"), Ref("v_pool"), Ref("block_table"), Ref("seq_len"),
                          scratch or None, rows, max_blocks, bs, Hq, Hkv, D, scale, ROPE_EPS, S,
                          swap=swap, steal=steal)

    def reference(x):
        qkv = x["qkv"].reshape(rows, heads, D).astype(np.float64)
        q, kk, vv = qkv[:, :Hq], qkv[:, Hq:Hq + Hkv], qkv[:, Hq + Hkv:]

        def rb(t):  # a bf16 store
            return bf16.round_f32(t.astype(np.float32)).astype(np.float64)

        if norm:  # rounding points of add_rmsnorm: bf16(w * bf16(x / rms))
            for t, w in ((q, x["q_norm"]), (kk, x["k_norm"])):
                t[:] = rb(w * rb(t / np.sqrt(np.mean(t * t, axis=-1, keepdims=True) + ROPE_EPS)))
        cs = x["rope"].astype(np.float64)[x["positions"].astype(np.int64)]  # [rows, D/2, 2]
        c, s_ = cs[:, None, :, 0], cs[:, None, :, 1]

        def rotate(t):  # rotate_half, then stored as bf16
            t1, t2 = t[..., : D // 2], t[..., D // 2:]
            return rb(np.concatenate([t1 * c - t2 * s_, t2 * c + t1 * s_], axis=-1))

        q, kk = rotate(q), rotate(kk)
        kp = x["k_pool"].astype(np.float64).reshape(-1, Hkv, D).copy()
        vp = x["v_pool"].astype(np.float64).reshape(-1, Hkv, D).copy()
        for r, sl in enumerate(x["slots"]):
            if sl >= 0:
                kp[sl], vp[sl] = kk[r], vv[r]
        kp, vp = kp.reshape(k.data.shape), vp.reshape(v.data.shape)
        out = np.zeros((rows, Hq, D))
        for r, n in enumerate(lens):
            kr, vr = _gather(kp, x["block_table"][r], n, bs), _gather(vp, x["block_table"][r], n, bs)
            for h in range(Hq):
                out[r, h] = _softmax_attention(q[r, h], kr[:, h // G], vr[:, h // G], scale)
        res = {"out": out.reshape(rows, Hq * D), **_rope_kv_twin(x, rows, Hq, Hkv, D, norm)}
        if SCRATCH_COUNT in checks:
            res[SCRATCH_COUNT] = np.zeros_like(x[SCRATCH_COUNT])
        return res

    return KernelCase(name, prog, buffers, checks, reference,
                      notes=f"seq_len={lens}, slots={slots.tolist()}, num_splits={S}, qk_norm={norm}")


def _combine_case(name: str, rng, rows: int, Hq: int, D: int, S: int) -> KernelCase:
    o = rng.standard_normal((rows, Hq, S, D)).astype(np.float32)
    ml = np.stack([rng.normal(0, 3, (rows, Hq, S)), rng.uniform(0.5, 40, (rows, Hq, S))], -1)
    ml = ml.astype(np.float32)
    ml[0, 0, S - 1] = (-np.inf, 0.0)  # an empty split
    buffers = {SCRATCH_O: Buffer(o, "f32"), SCRATCH_ML: Buffer(ml, "f32"),
               "out": poison((rows, Hq * D), "bf16")}
    prog = Program(name)
    attention_combine(prog, Ref("out"), {SCRATCH_O: Ref(SCRATCH_O), SCRATCH_ML: Ref(SCRATCH_ML)},
                      rows, Hq, D, S)

    def reference(x):
        m = x[SCRATCH_ML][..., 0].astype(np.float64)
        w = x[SCRATCH_ML][..., 1] * np.exp(m - m.max(-1, keepdims=True))
        res = np.einsum("rhs,rhsd->rhd", w, x[SCRATCH_O].astype(np.float64)) / w.sum(-1)[..., None]
        return {"out": res.reshape(rows, Hq * D)}

    return KernelCase(name, prog, buffers, {"out": DECODE_CHECK}, reference)


def _prefill_case(name: str, rng, T: int, start: int, block_size: int, Hq: int, Hkv: int, D: int,
                  shuffle: bool = False) -> KernelCase:
    positions = (start + (rng.permutation(T) if shuffle else np.arange(T))).astype(np.uint32)
    n = start + T  # keys in the pool: earlier chunks' plus this chunk's
    max_blocks = -(-n // block_size) + 2
    k, v, table = _paged_pools(rng, [n], block_size, Hkv, D, max_blocks)
    scale = 1.0 / np.sqrt(D)
    buffers = {
        "q": rand_bf16(rng, (T, Hq * D), scale=1.5),
        "k_pool": k,
        "v_pool": v,
        "block_table": Buffer(table[0], "i32"),
        "positions": Buffer(positions, "u32"),
        "out": poison((T, Hq * D), "bf16"),
    }
    prog = Program(name)
    attention_prefill(prog, Ref("out"), Ref("q"), Ref("k_pool"), Ref("v_pool"), Ref("block_table"),
                      Ref("positions"), T, max_blocks, block_size, Hq, Hkv, D, scale)

    def reference(x):
        q = x["q"].reshape(T, Hq, D).astype(np.float64)
        kk = _gather(x["k_pool"], x["block_table"], n, block_size)
        vv = _gather(x["v_pool"], x["block_table"], n, block_size)
        out = np.zeros((T, Hq, D))
        for t in range(T):
            p = int(x["positions"][t])
            for h in range(Hq):
                kvh = h // (Hq // Hkv)
                out[t, h] = _softmax_attention(q[t, h], kk[: p + 1, kvh], vv[: p + 1, kvh], scale)
        return {"out": out.reshape(T, Hq * D)}

    return KernelCase(name, prog, buffers, {"out": PREFILL_CHECK}, reference,
                      notes=f"positions {start}..{start + T - 1}{' shuffled' if shuffle else ''}")


# name -> (rows, block_size, Hq, Hkv, D, num_splits)
DECODE_CASES = {
    "attention_decode_r1_bs16_h32kv8_d128_s1": (1, 16, 32, 8, 128, 1),
    "attention_decode_r1_bs32_h9kv3_d64_s7": (1, 32, 9, 3, 64, 7),
    "attention_decode_r5_bs32_h9kv3_d64_s4": (5, 32, 9, 3, 64, 4),
    "attention_decode_r5_bs16_h9kv3_d128_s7": (5, 16, 9, 3, 128, 7),
    "attention_decode_r8_bs16_h16kv16_d128_s7": (8, 16, 16, 16, 128, 7),
    "attention_decode_r8_bs32_h32kv8_d64_s1": (8, 32, 32, 8, 64, 1),
    "attention_decode_r8_bs16_h32kv8_d128_s4": (8, 16, 32, 8, 128, 4),
    "attention_decode_r5_bs16_h16kv16_d64_s1": (5, 16, 16, 16, 64, 1),
    "attention_decode_r3_bs16_h8kv4_d96_s4": (3, 16, 8, 4, 96, 4),
    "attention_decode_r2_bs32_h16kv1_d256_s2": (2, 32, 16, 1, 256, 2),  # G=16: two head passes
    "attention_decode_r3_bs16_h12kv1_d64_s1": (3, 16, 12, 1, 64, 1),  # G=12: a partial pass
    "attention_decode_r2_bs16_h40kv2_d64_s5": (2, 16, 40, 2, 64, 5),  # G=20: two MMA head passes
    "attention_decode_r4_bs16_h16kv8_d96_s3": (4, 16, 16, 8, 96, 3),
    # block sizes that are not powers of two (the kernel divides by them with a multiply)
    "attention_decode_r3_bs12_h8kv4_d96_s4": (3, 12, 8, 4, 96, 4),
    "attention_decode_r2_bs7_h16kv8_d128_s5": (2, 7, 16, 8, 128, 5),
    # query heads on the MMA's N (the _sw entry): G = 2 and 4 over random lengths with a padding
    # row, G = 9 in passes of 8 and 1
    "attention_decode_r5_bs16_h16kv8_d128_s7_sw": (5, 16, 16, 8, 128, 7, 1500, None, True),
    "attention_decode_r3_bs32_h32kv8_d128_s4_sw": (3, 32, 32, 8, 128, 4, 1500, None, True),
    "attention_decode_r5_bs16_h9kv1_d128_s3_sw": (5, 16, 9, 1, 128, 3, 1500, None, True),
}

# name -> (rows, num_splits, Hq, Hkv, D): seq_len 1 .. past S * block_size (see _split_decode_case)
SPLIT_DECODE_CASES = {
    f"attention_decode_split_r{r}_s{s}_h{hq}kv8_d128": (r, s, hq, 8, 128)
    for r in (1, 4) for s, hq in ((2, 16), (5, 32), (16, 16), (32, 32))
}
SPLIT_DECODE_CASES["attention_decode_split_r4_s5_h16kv4_d256"] = (4, 5, 16, 4, 256)
SPLIT_DECODE_CASES["attention_decode_split_r4_s16_h8kv2_d64"] = (4, 16, 8, 2, 64)
# the last arriver's merge: G = 8 at D = 64 and G = 5 at D = 96 (one thread per head and 4 columns,
# some idle); G = 2 at D = 128 with 64 splits (33 used at 1029 keys): five rounds of 8 loads,
# the last partial (its loads repeat the last split, at weight 0)
SPLIT_DECODE_CASES["attention_decode_split_r3_s32_h64kv8_d64"] = (3, 32, 64, 8, 64)
SPLIT_DECODE_CASES["attention_decode_split_r3_s32_h40kv8_d96"] = (3, 32, 40, 8, 96)
SPLIT_DECODE_CASES["attention_decode_split_r2_s64_h16kv8_d128"] = (2, 64, 16, 8, 128)
# G = 1 (MHA) with up to 32 splits: the last arriver's merge with most of its lanes idle
SPLIT_DECODE_CASES["attention_decode_split_r4_s32_h8kv8_d128"] = (4, 32, 8, 8, 128)
SPLIT_DECODE_CASES["attention_decode_split_r2_s32_h16kv16_d64"] = (2, 32, 16, 16, 64)

# name -> (rows, block_size, Hq, Hkv, D, num_splits, qk_norm, seq_len per row, row with slot -1)
ROPE_CASES = {
    "attention_decode_rope_r1_bs16_h16kv8_d128_s2_norm": (1, 16, 16, 8, 128, 2, True, [129], None),
    "attention_decode_rope_r1_bs16_h16kv8_d128_s32": (1, 16, 16, 8, 128, 32, False, [129], None),
    # seq_len 1; a token ending a block; a token starting one
    "attention_decode_rope_r3_bs16_h32kv8_d128_s7_norm": (3, 16, 32, 8, 128, 7, True, [1, 160, 97], None),
    "attention_decode_rope_r3_bs16_h32kv8_d128_s32_norm": (3, 16, 32, 8, 128, 32, True, [129, 1024, 16], 2),
    "attention_decode_rope_r3_bs32_h9kv3_d64_s32": (3, 32, 9, 3, 64, 32, False, [33, 700, 5], 1),
    "attention_decode_rope_r1_bs16_h12kv1_d64_s1_norm": (1, 16, 12, 1, 64, 1, True, [1], None),
    # one split of up to 5 tiles: the token's tile is a refill (300: tile 4; 150: tile 2) or tile 1 (65)
    "attention_decode_rope_r3_bs16_h12kv1_d128_s1": (3, 16, 12, 1, 128, 1, False, [300, 150, 65], None),
    "attention_decode_rope_r3_bs16_h8kv4_d96_s7_norm": (3, 16, 8, 4, 96, 7, True, [50, 1, 16], 1),
    # G = 20: two head passes; the second takes the token's k/v from shared memory
    "attention_decode_rope_r3_bs16_h40kv2_d64_s1_norm": (3, 16, 40, 2, 64, 1, True, [70, 300, 1], None),
    # more than 512 blocks in one split: the kernel's shared block-table window moves (twice at 1200)
    "attention_decode_rope_r2_bs1_h8kv2_d128_s1": (2, 1, 8, 2, 128, 1, False, [1200, 600], None),
    # block sizes that are not powers of two: the token's slot and every key's block by multiply
    "attention_decode_rope_r3_bs24_h16kv8_d128_s7_norm": (3, 24, 16, 8, 128, 7, True, [97, 24, 1000], None),
    "attention_decode_rope_r2_bs5_h12kv2_d64_s3": (2, 5, 12, 2, 64, 3, False, [130, 6], 1),
    # the long-context entry (d128 from 24 splits, 16 partials a merge round): 33 used splits at
    # 1029 keys (three rounds, the last with one), 22 at 700 (two); G = 2
    "attention_decode_rope_r2_bs16_h16kv8_d128_s48": (2, 16, 16, 8, 128, 48, False, [1029, 700], None),
    # G = 4 (8B-class): 32 used splits at 2048 keys, the second row 5 keys (one used split)
    "attention_decode_rope_r2_bs16_h32kv8_d128_s32_norm": (2, 16, 32, 8, 128, 32, True, [2048, 5], 1),
    # the long entry at the other GQA ratios of the supported models: G = 7 (Qwen2.5-7B's 28 / 4),
    # G = 3 (Llama-3.2-3B's 24 / 8) at exactly LONG_MERGE_MIN_SPLITS, G = 1 (MHA) with a row
    # whose token writes no K/V
    "attention_decode_rope_r2_bs16_h28kv4_d128_s32": (2, 16, 28, 4, 128, 32, False, [1500, 40], None),
    "attention_decode_rope_r1_bs16_h24kv8_d128_s24_norm": (1, 16, 24, 8, 128, 24, True, [777], None),
    "attention_decode_rope_r2_bs32_h8kv8_d128_s40": (2, 32, 8, 8, 128, 40, False, [1300, 1299], 0),
    # the long entry with at most 16 used splits (one merge round: 16 at 1000 keys, 9 at 520)
    "attention_decode_rope_r2_bs64_h16kv8_d128_s24": (2, 64, 16, 8, 128, 24, False, [1000, 520], None),
    # query heads on the MMA's N (the _sw entries; the last field): G = 2 over splits of 8 tiles
    # (the token in tile 7 of split 1); G = 4 with seq_len 1, a token ending a block and one
    # starting one; G = 7 and G = 1 on the long merge; G = 12 and 20 in passes of 8 (the later
    # passes take the token from shared memory); the block-table window moving at bs 1; a block
    # size that is not a power of two
    "attention_decode_rope_r1_bs16_h16kv8_d128_s2_sw_norm": (1, 16, 16, 8, 128, 2, True, [1000], None, True),
    "attention_decode_rope_r3_bs16_h32kv8_d128_s7_sw_norm": (3, 16, 32, 8, 128, 7, True, [1, 160, 97], 2, True),
    "attention_decode_rope_r2_bs16_h28kv4_d128_s32_sw": (2, 16, 28, 4, 128, 32, False, [1500, 40], None, True),
    "attention_decode_rope_r2_bs32_h8kv8_d128_s40_sw": (2, 32, 8, 8, 128, 40, False, [1300, 1299], 0, True),
    "attention_decode_rope_r3_bs16_h12kv1_d128_s1_sw": (3, 16, 12, 1, 128, 1, False, [300, 150, 65], None, True),
    "attention_decode_rope_r2_bs16_h40kv2_d128_s3_sw_norm": (2, 16, 40, 2, 128, 3, True, [700, 230], 1, True),
    "attention_decode_rope_r2_bs1_h8kv2_d128_s1_sw": (2, 1, 8, 2, 128, 1, False, [1200, 600], None, True),
    "attention_decode_rope_r3_bs24_h16kv8_d128_s7_sw_norm": (3, 24, 16, 8, 128, 7, True, [97, 24, 1000], None, True),
    # head dims 64 (SmolLM2's 9 / 3 heads) and 96, over splits of several tiles
    "attention_decode_rope_r3_bs16_h9kv3_d64_s4_sw_norm": (3, 16, 9, 3, 64, 4, True, [700, 1, 129], 1, True),
    "attention_decode_rope_r2_bs16_h8kv2_d96_s3_sw": (2, 16, 8, 2, 96, 3, False, [500, 64], None, True),
    "attention_decode_rope_r2_bs16_h40kv4_d64_s2_sw": (2, 16, 40, 4, 64, 2, False, [300, 17], None, True),
    # _swp (the d128 _sw code holding idle registers): G = 2 over splits of 8 tiles, G = 4 with a
    # padding row, G = 12 in two passes at 16 splits
    "attention_decode_rope_r1_bs16_h16kv8_d128_s2_swp_norm": (1, 16, 16, 8, 128, 2, True, [1000], None, "swp"),
    "attention_decode_rope_r3_bs16_h32kv8_d128_s7_swp_norm": (3, 16, 32, 8, 128, 7, True, [1, 160, 97], 2, "swp"),
    "attention_decode_rope_r2_bs16_h12kv1_d128_s16_swp": (2, 16, 12, 1, 128, 16, False, [1500, 333], None, "swp"),
    # ... and the others (FIXEDGRAPH_ATTN_SWAP=3): the long merge (G = 7 at 32 splits, G = 1 at
    # 40), head dims 64 (SmolLM2's 9 / 3) and 96
    "attention_decode_rope_r2_bs16_h28kv4_d128_s32_swp": (2, 16, 28, 4, 128, 32, False, [1500, 40], None, "swp"),
    "attention_decode_rope_r2_bs32_h8kv8_d128_s40_swp": (2, 32, 8, 8, 128, 40, False, [1300, 1299], 0, "swp"),
    "attention_decode_rope_r3_bs16_h9kv3_d64_s4_swp_norm": (3, 16, 9, 3, 64, 4, True, [700, 1, 129], 1, "swp"),
    "attention_decode_rope_r2_bs16_h8kv2_d96_s3_swp": (2, 16, 8, 2, 96, 3, False, [500, 64], None, "swp"),
}

# The tile-sharing entries (steal: a split's first two tiles by its index, the rest taken from a
# counter): name -> (rows, block_size, Hq, Hkv, D, num_splits, max_len, lens, swap, steal, twice).
# Tiles past 2 x splits are taken at run time (5000 keys: 79 tiles, 15 taken at 32 splits); fewer
# tiles than splits (700 keys: 11 used); one split taking every tile itself (S = 1); two splits
# sharing 32 tiles; a row of 0 keys and a padding row; rows whose block table is not 16-byte
# aligned (max_blocks odd); G = 16 (one pass of 16 heads); a block size that is not a power of 2;
# and two launches in a row (the tile counters back at 0 after the first).
STEAL_DECODE_CASES = {
    "attention_decode_st_r1_bs16_h32kv8_d128_s32": (1, 16, 32, 8, 128, 32, 0, [5000], False, True, False),
    "attention_decode_st_r3_bs16_h16kv8_d128_s24": (3, 16, 16, 8, 128, 24, 0, [3073, 700, 1029], False, True, False),
    "attention_decode_st_r1_bs16_h16kv8_d128_s1": (1, 16, 16, 8, 128, 1, 0, [700], False, True, False),
    "attention_decode_st_r1_bs16_h8kv8_d128_s2": (1, 16, 8, 8, 128, 2, 0, [2000], False, True, False),
    "attention_decode_st_r3_bs16_h32kv8_d128_s32_len0": (3, 16, 32, 8, 128, 32, 0, [0, 3000, 65], False, True, False),
    "attention_decode_st_r5_bs32_h64kv4_d128_s24": (5, 32, 64, 4, 128, 24, 5000, None, False, True, False),
    "attention_decode_st_r2_bs7_h16kv16_d128_s32": (2, 7, 16, 16, 128, 32, 0, [4500, 1], False, True, False),
    "attention_decode_st_r2_bs16_h32kv8_d128_s32_twice": (2, 16, 32, 8, 128, 32, 0, [6000, 2500], False, True, True),
}

# name -> (rows, Hq, D, num_splits)
COMBINE_CASES = {
    "attention_combine_r2_h9_d96_s5": (2, 9, 96, 5),
    "attention_combine_r1_h16_d128_s32": (1, 16, 128, 32),
}

# name -> (T, first position, block_size, Hq, Hkv, D, shuffled positions)
PREFILL_CASES = {
    "attention_prefill_t1_p0_bs16_h32kv8_d128": (1, 0, 16, 32, 8, 128, False),
    "attention_prefill_t1_p200_bs16_h32kv8_d128": (1, 200, 16, 32, 8, 128, False),
    "attention_prefill_t17_p0_bs16_h9kv3_d64": (17, 0, 16, 9, 3, 64, False),
    "attention_prefill_t17_p200_bs32_h9kv3_d64": (17, 200, 32, 9, 3, 64, False),
    "attention_prefill_t128_p0_bs16_h16kv16_d128": (128, 0, 16, 16, 16, 128, False),
    "attention_prefill_t128_p200_bs16_h32kv8_d128": (128, 200, 16, 32, 8, 128, False),
    "attention_prefill_t128_p200_bs32_h9kv3_d64": (128, 200, 32, 9, 3, 64, False),
    "attention_prefill_t128_p0_bs32_h16kv16_d64": (128, 0, 32, 16, 16, 64, False),
    "attention_prefill_t17_p200_bs16_h8kv4_d96": (17, 200, 16, 8, 4, 96, True),
    "attention_prefill_t100_p0_bs16_h12kv1_d64": (100, 0, 16, 12, 1, 64, False),
}


def _register(table: dict, build) -> None:
    for case_name, params in table.items():
        kernel_case(case_name)(lambda rng, n=case_name, p=params: build(n, rng, *p))


_register(DECODE_CASES, _decode_case)
_register(SPLIT_DECODE_CASES, _split_decode_case)
_register(COMBINE_CASES, _combine_case)
_register(ROPE_CASES, _rope_case)
_register(STEAL_DECODE_CASES, _decode_case)
# The fused long entry with tiles shared out (steal; split 0 writes the token's K/V, from tile
# T-1): G = 2 with QK-norm and a 1-key row; G = 4 at exactly STEAL_MIN_SPLITS with a row that
# writes no K/V and a token ending tile 47 (3072 keys); G = 7 at a block size that is not a power
# of 2; G = 1 with more splits than pairs of tiles (none taken from the counter).
_register({
    "attention_decode_rope_st_r2_bs16_h16kv8_d128_s32_norm": (2, 16, 16, 8, 128, 32, True, [5000, 1], None, "", True),
    "attention_decode_rope_st_r3_bs16_h32kv8_d128_s24": (3, 16, 32, 8, 128, 24, False, [3072, 64, 129], 1, "", True),
    "attention_decode_rope_st_r2_bs24_h28kv4_d128_s32": (2, 24, 28, 4, 128, 32, False, [4100, 700], None, "", True),
    "attention_decode_rope_st_r1_bs16_h8kv8_d128_s40_norm": (1, 16, 8, 8, 128, 40, True, [2561], None, "", True),
    # below 24 splits (the _st entries, FIXEDGRAPH_ATTN_STEAL=2): d128 G = 2 at 16 splits over 4176
    # keys (66 tiles, 34 taken) with a 1-key row; d64 (SmolLM2's 9 / 3) and d96 with rows of fewer
    # tiles than splits, a row writing no K/V and a block size that is not a power of 2
    "attention_decode_rope_st_r2_bs16_h16kv8_d128_s16_norm": (2, 16, 16, 8, 128, 16, True, [4176, 1], None, "", True),
    "attention_decode_rope_st_r3_bs16_h9kv3_d64_s8_norm": (3, 16, 9, 3, 64, 8, True, [3000, 129, 64], 1, "", True),
    "attention_decode_rope_st_r2_bs12_h16kv4_d96_s4": (2, 12, 16, 4, 96, 4, False, [1100, 300], None, "", True),
}, _rope_case)
kernel_case("attention_decode_len0_r3_bs16_h32kv8_d128_s4")(  # an empty row gives zeros
    lambda rng: _decode_case("attention_decode_len0_r3_bs16_h32kv8_d128_s4", rng, 3, 16, 32, 8, 128,
                             4, lens=[0, 37, 200]))
# splits of more than 512 blocks (the kernel's shared block-table window moves): 1500 keys of
# block 1 move it twice, 1100 once, 513 just; S = 2 at 2100 keys of block 2: 525 blocks a split
kernel_case("attention_decode_window_r3_bs1_h8kv2_d128_s1")(
    lambda rng: _decode_case("attention_decode_window_r3_bs1_h8kv2_d128_s1", rng, 3, 1, 8, 2, 128, 1,
                             lens=[1500, 1100, 513]))
kernel_case("attention_decode_window_r2_bs2_h16kv2_d64_s2")(
    lambda rng: _decode_case("attention_decode_window_r2_bs2_h16kv2_d64_s2", rng, 2, 2, 16, 2, 64, 2,
                             lens=[2100, 1030]))
_register(PREFILL_CASES, _prefill_case)

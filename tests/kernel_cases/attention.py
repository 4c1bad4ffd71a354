"""Kernel cases of the paged attention entries (ptx/src/attention.cu), through fixedgraph.ops.

Pools are filled so that a kernel reading anything it must not shows up as NaN in its output:
every pool slot past a sequence's last valid key holds NaN, and block-table entries past the
sequence point at an all-NaN block. Live blocks are a shuffled, non-contiguous set.
"""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.ops.attention import attention_decode, attention_prefill, decode_scratch
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison, rand_bf16

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


def _decode_case(name: str, rng, rows: int, block_size: int, Hq: int, Hkv: int, D: int, S: int,
                 max_len: int = 1500) -> KernelCase:
    lens = [int(x) for x in rng.integers(1, max_len + 1, rows)]
    lens[0] = block_size * int(rng.integers(1, max_len // block_size + 1))  # a block boundary
    pad = rows >= 5  # the last row is a padding row: seq_len 1 on dummy block 0
    max_blocks = -(-max(lens) // block_size) + 1
    k, v, table = _paged_pools(rng, lens[:-1] if pad else lens, block_size, Hkv, D, max_blocks)
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
    scratch = {}
    for region, (shape, dtype) in decode_scratch(rows, Hq, D, S).items():
        buffers[region] = poison(shape, dtype)  # scratch: every byte the combine reads is written
        scratch[region] = Ref(region)
    prog = Program(name)
    attention_decode(prog, Ref("out"), Ref("q"), Ref("k_pool"), Ref("v_pool"), Ref("block_table"),
                     Ref("seq_len"), scratch or None, rows, max_blocks, block_size, Hq, Hkv, D,
                     scale, S)

    def reference(x):
        q = x["q"].reshape(rows, Hq, D).astype(np.float64)
        out = np.zeros((rows, Hq, D))
        for r in range(rows):
            n = int(x["seq_len"][r])
            kk = _gather(x["k_pool"], x["block_table"][r], n, block_size)
            vv = _gather(x["v_pool"], x["block_table"][r], n, block_size)
            for h in range(Hq):
                kvh = h // (Hq // Hkv)
                out[r, h] = _softmax_attention(q[r, h], kk[:, kvh], vv[:, kvh], scale)
        return {"out": out.reshape(rows, Hq * D)}

    return KernelCase(name, prog, buffers, {"out": DECODE_CHECK}, reference,
                      notes=f"seq_len={lens}, num_splits={S}")


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
_register(PREFILL_CASES, _prefill_case)

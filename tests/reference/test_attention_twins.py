"""Paged attention twins and launchers (fixedgraph.ops.attention) on the reference backend.

tests/reference/test_kernel_cases.py checks every attention case against its float64 formula;
here: the cases can catch over-reads (negative control), split-K does not change the answer,
graph replay finds the arrival counters back at 0, prefill agrees with decode on the same token,
and the launchers emit and refuse what they should.
"""
from __future__ import annotations

import numpy as np
import pytest

from fixedgraph.backends.reference import ReferenceDevice
from fixedgraph.ops import attention as ops
from fixedgraph import bf16
from fixedgraph.program import Null, Program, Ref
from fixedgraph.layout import dtype_of
from tests.kernel_cases import Buffer, KernelCase, compare, inputs_of, load_all, run_case

CASES = {n: f for n, f in load_all().items() if n.startswith("attention_")}


def _with(case: KernelCase, **buffers: np.ndarray) -> KernelCase:
    """The same case with some input buffers' contents replaced."""
    new = dict(case.buffers)
    for name, data in buffers.items():
        new[name] = Buffer(data, case.buffers[name].dtype)
    return KernelCase(case.name, case.program, new, case.outputs, case.reference)


def _rebuild_decode(case: KernelCase, num_splits: int) -> KernelCase:
    """The decode case's buffers under a program with another num_splits."""
    launch = case.program.launches[0]
    rows, max_blocks, block_size, Hq, Hkv, D, _, scale = launch.args[9:]
    bufs = {n: b for n, b in case.buffers.items() if not n.startswith("attn_split")}
    scratch = {}
    for region, (shape, dtype) in ops.decode_scratch(rows, Hq, D, num_splits, Hkv).items():
        fill = 0 if region == ops.SCRATCH_COUNT else np.nan
        bufs[region] = Buffer(np.full(shape, fill, dtype_of(dtype)), dtype)
        scratch[region] = Ref(region)
    prog = Program(f"{case.name}_s{num_splits}")
    ops.attention_decode(prog, Ref("out"), Ref("q"), Ref("k_pool"), Ref("v_pool"),
                         Ref("block_table"), Ref("seq_len"), scratch or None, rows, max_blocks,
                         block_size, Hq, Hkv, D, scale, num_splits)
    return KernelCase(case.name, prog, bufs, {"out": case.outputs["out"]}, case.reference)


def test_every_entry_has_cases():
    entries = {l.entry for f in CASES.values() for l in f(np.random.default_rng(0)).program.launches}
    want = {f"paged_attention_decode_d{d}" for d in ops.DECODE_HEAD_DIMS}
    want |= {f"paged_attention_decode_rope_d{d}" for d in ops.DECODE_ROPE_HEAD_DIMS}
    want |= {f"paged_attention_prefill_d{d}" for d in ops.PREFILL_HEAD_DIMS}
    want.add("paged_attention_decode_rope_long_d128")  # d128 from LONG_MERGE_MIN_SPLITS splits
    want |= {f"paged_attention_decode_rope_sw_d{d}" for d in ops.DECODE_ROPE_HEAD_DIMS}  # heads on N
    want |= {"paged_attention_decode_rope_long_sw_d128", "paged_attention_decode_sw_d128",
             "paged_attention_decode_rope_long_swp_d128"}
    want |= {f"paged_attention_decode_rope_swp_d{d}" for d in ops.DECODE_ROPE_HEAD_DIMS}
    want |= {"paged_attention_decode_st_d128", "paged_attention_decode_rope_long_st_d128"}  # tiles shared
    want |= {f"paged_attention_decode_rope_st_d{d}" for d in ops.DECODE_ROPE_HEAD_DIMS}
    assert want | {"paged_attention_combine"} == entries
    decode_cases = [f(np.random.default_rng(0)) for n, f in CASES.items() if "decode" in n]
    # one launch, no combine (the _twice cases launch the same op twice on purpose)
    assert all(len(c.program.launches) == (2 if c.name.endswith("_twice") else 1) for c in decode_cases)


@pytest.mark.parametrize("name", ["attention_decode_r5_bs16_h9kv3_d128_s7",
                                  "attention_decode_r8_bs32_h32kv8_d64_s1"])
def test_decode_reading_one_key_too_many_is_caught(name, rng):
    # Negative control: one more key per live row lands on a NaN pool slot or the NaN block.
    case = CASES[name](rng)
    seq_len = case.buffers["seq_len"].data.copy()
    seq_len[:-1] += 1  # the last row may be the padding row on dummy block 0
    out = run_case(_with(case, seq_len=seq_len), ReferenceDevice())
    assert compare("out", out["out"], case.reference(inputs_of(case))["out"], case.outputs["out"])


def test_prefill_attending_one_key_too_many_is_caught(rng):
    case = CASES["attention_prefill_t128_p200_bs16_h32kv8_d128"](rng)
    positions = case.buffers["positions"].data + np.uint32(1)
    out = run_case(_with(case, positions=positions), ReferenceDevice())
    assert compare("out", out["out"], case.reference(inputs_of(case))["out"], case.outputs["out"])


@pytest.mark.parametrize("splits", [1, 2, 3, 16])
def test_split_count_does_not_change_decode(splits, rng):
    case = CASES["attention_decode_r8_bs16_h32kv8_d128_s4"](rng)
    base = run_case(case, ReferenceDevice())["out"]
    other = run_case(_rebuild_decode(case, splits), ReferenceDevice())["out"]
    # fp32 merge order differs; at most one bf16 rounding step apart.
    assert np.allclose(other, base, atol=1e-3, rtol=8e-3)


def test_prefill_last_token_matches_decode(rng):
    # The chunk's last token attends every key, exactly what decode computes for that token.
    pre = CASES["attention_prefill_t17_p200_bs32_h9kv3_d64"](rng)
    T, Hq, Hkv, D, bs = 17, 9, 3, 64, 32
    table = pre.buffers["block_table"].data
    bufs = {
        "q": Buffer(pre.buffers["q"].data[T - 1 :], "bf16"),
        "k_pool": pre.buffers["k_pool"], "v_pool": pre.buffers["v_pool"],
        "block_table": Buffer(table[None, :], "i32"),
        "seq_len": Buffer(np.array([200 + T], np.int32), "i32"),
        "out": Buffer(np.full((1, Hq * D), 0x7FC1, np.uint16), "bf16"),
    }
    scratch = {}
    for region, (shape, dtype) in ops.decode_scratch(1, Hq, D, 3, Hkv).items():
        fill = 0 if region == ops.SCRATCH_COUNT else np.nan
        bufs[region] = Buffer(np.full(shape, fill, dtype_of(dtype)), dtype)
        scratch[region] = Ref(region)
    prog = Program("decode_of_last_token")
    ops.attention_decode(prog, Ref("out"), Ref("q"), Ref("k_pool"), Ref("v_pool"),
                         Ref("block_table"), Ref("seq_len"), scratch, 1, table.size, bs, Hq, Hkv,
                         D, 1.0 / np.sqrt(D), 3)
    dec = KernelCase("decode_of_last_token", prog, bufs, pre.outputs)
    got_dec = run_case(dec, ReferenceDevice())["out"].reshape(Hq * D)
    got_pre = run_case(pre, ReferenceDevice())["out"].reshape(T, Hq * D)[T - 1]
    assert np.allclose(got_dec, got_pre, atol=8e-3, rtol=1.6e-2)


def test_decode_launches():
    prog = Program("p")
    scratch = {n: Ref(n) for n in ops.decode_scratch(8, 32, 128, 4, 8)}
    ops.attention_decode(prog, Ref("o"), Ref("q"), Ref("k"), Ref("v"), Ref("bt"), Ref("sl"), scratch,
                         8, 64, 16, 32, 8, 128, 0.088, 4)
    (dec,) = prog.launches  # the split merge happens inside the decode launch
    assert (dec.entry, dec.grid, dec.block) == ("paged_attention_decode_d128", (8, 8, 4), (128, 1, 1))
    assert dec.shared == ops.decode_shared_bytes(128) == 2 * 2 * 64 * 136 * 2
    assert dec.args[3] == Ref(ops.SCRATCH_COUNT)
    prog1 = Program("p1")
    ops.attention_decode(prog1, Ref("o"), Ref("q"), Ref("k"), Ref("v"), Ref("bt"), Ref("sl"), None,
                         8, 64, 16, 32, 8, 128, 0.088, 1)
    assert [l.entry for l in prog1.launches] == ["paged_attention_decode_d128"]
    assert all(isinstance(a, Null) for a in prog1.launches[0].args[1:4])
    assert ops.decode_scratch(8, 32, 128, 1) == {}
    need = ops.decode_scratch(8, 32, 128, 4, 8)
    assert need[ops.SCRATCH_O] == ((8, 32, 4, 128), "f32")
    # arrival counters, then the tile-sharing entries' tile counters
    assert need[ops.SCRATCH_COUNT] == ((16, 8), "u32") and ops.SCRATCH_COUNT in ops.ZERO_AT_BOOT
    assert ops.decode_scratch(8, 32, 128, 4)[ops.SCRATCH_COUNT] == ((16, 32), "u32")  # Hkv unknown
    assert ops.decode_shared_bytes(256) == 0


def _decode_on_one_arena(case: KernelCase):
    """The case's buffers on a reference arena and its bound program (to run it repeatedly)."""
    from fixedgraph.layout import ArenaPlan

    dev = ReferenceDevice()
    plan = ArenaPlan()
    for name, buf in case.buffers.items():
        plan.add(name, buf.data.shape, buf.dtype)
    arena = dev.arena(plan)
    for name, buf in case.buffers.items():
        arena.write(name, buf.data.astype(dtype_of(buf.dtype), copy=False))
    return dev, arena, dev.bind(case.program, arena)


@pytest.mark.parametrize("name", ["attention_decode_split_r4_s32_h32kv8_d128",
                                  "attention_decode_split_r4_s5_h16kv4_d256"])
def test_decode_replay_leaves_counters_at_zero(name, rng):
    # A graph replays the same launch on the same scratch: the counters must be 0 after each run
    # and the second run (new q, new lengths) must be right again.
    case = CASES[name](rng)
    dev, arena, bound = _decode_on_one_arena(case)
    for step in range(2):
        dev.run(bound, checked=True)
        got = {n: arena.read(n) for n in ("out", ops.SCRATCH_COUNT)}
        want = case.reference(inputs_of(case))
        assert compare("out", bf16.to_f32(got["out"]), want["out"], case.outputs["out"]) is None
        assert not got[ops.SCRATCH_COUNT].any(), f"step {step}: counters not back at 0"
        q = bf16.from_f32(rng.standard_normal(case.buffers["q"].data.shape).astype(np.float32))
        seq_len = np.maximum(case.buffers["seq_len"].data - 3 * step - 1, 1).astype(np.int32)
        case = _with(case, q=q, seq_len=seq_len)
        arena.write("q", q)
        arena.write("seq_len", seq_len)


def test_decode_refuses_dirty_counters(rng):
    case = CASES["attention_decode_split_r1_s16_h16kv8_d128"](rng)
    dev, arena, bound = _decode_on_one_arena(case)
    arena.write(ops.SCRATCH_COUNT, np.full(case.buffers[ops.SCRATCH_COUNT].data.shape, 3, np.uint32))
    with pytest.raises(Exception, match="must be zeroed once at boot"):
        dev.run(bound, checked=True)


def test_decode_partials_feed_the_legacy_combine(rng):
    # Rows 1 and 2 (512 keys, S=32, block 16) use all 32 splits: the partials the decode leaves
    # in scratch, merged by paged_attention_combine, give the same out.
    case = CASES["attention_decode_split_r4_s32_h32kv8_d128"](rng)
    seq_len = case.buffers["seq_len"].data.copy()
    assert seq_len[1] >= 512 and seq_len[2] == 512
    seq_len[1] = 512
    case = _with(case, seq_len=seq_len)
    dev, arena, bound = _decode_on_one_arena(case)
    dev.run(bound, checked=True)
    fused = bf16.to_f32(arena.read("out"))
    prog = Program("combine")
    ops.attention_combine(prog, Ref("out"), {n: Ref(n) for n in (ops.SCRATCH_O, ops.SCRATCH_ML)},
                          4, 32, 128, 32)
    arena.write("out", np.full(fused.shape, 0x7FC1, np.uint16))
    dev.run(dev.bind(prog, arena), checked=True)
    combined = bf16.to_f32(arena.read("out"))
    assert np.allclose(combined[1:3], fused[1:3], atol=1e-3, rtol=8e-3)


def test_prefill_launch_grid():
    prog = Program("p")
    ops.attention_prefill(prog, Ref("o"), Ref("q"), Ref("k"), Ref("v"), Ref("bt"), Ref("pos"),
                          4096, 300, 16, 32, 8, 128, 0.088)
    (l,) = prog.launches
    rows, threads = ops.PREFILL_ROWS_PER_CTA, ops.PREFILL_THREADS
    assert threads == rows * 2  # 16 (token, head) rows per warp
    assert (l.entry, l.grid, l.block) == ("paged_attention_prefill_d128", (4096 * 4 // rows, 8, 1), (threads, 1, 1))


def test_launchers_refuse_bad_shapes():
    refs = [Ref(n) for n in ("o", "q", "k", "v", "bt", "sl")]
    with pytest.raises(ValueError, match="head_dim 80 is not supported"):
        ops.attention_decode(Program("p"), *refs, None, 1, 4, 16, 8, 8, 80, 0.1, 1)
    with pytest.raises(ValueError, match="head_dim 256 is not supported"):
        ops.attention_prefill(Program("p"), *refs, 5, 4, 16, 8, 8, 256, 0.1)
    with pytest.raises(ValueError, match="multiple of Hkv"):
        ops.attention_decode(Program("p"), *refs, None, 1, 4, 16, 10, 4, 128, 0.1, 1)
    with pytest.raises(ValueError, match="needs scratch regions"):
        ops.attention_decode(Program("p"), *refs, None, 1, 4, 16, 8, 8, 128, 0.1, 3)


def test_choose_num_splits():
    assert ops.choose_num_splits(ops.MIN_KEYS_PER_SPLIT * 2 - 1, 1, 8) == 1  # too short to split
    assert ops.choose_num_splits(32768, 256, 8) == 1  # the batch already fills the GPU
    long_one = ops.choose_num_splits(32768, 1, 8)
    assert long_one == ops.MAX_SPLITS and 1 * 8 * long_one >= 132
    for rows in (1, 2, 4, 8, 16):  # never more CTAs than two per SM
        assert rows * 8 * ops.choose_num_splits(32768, rows, 8) <= 2 * 132
    assert ops.choose_num_splits(4096, 4, 2) <= 4096 // ops.MIN_KEYS_PER_SPLIT
    assert ops.choose_num_splits(200, 1, 8) == 200 // ops.MIN_KEYS_PER_SPLIT


def test_choose_num_splits_one_cta_per_sm_below_the_streaming_size(monkeypatch):
    """Up to ONE_PER_SM_MIB of K/V a launch (at the bucket's longest context) the splits fill one
    CTA per SM, past it two; FIXEDGRAPH_ATTN_ONE_PER_SM_MIB=0 is the old always-two policy."""
    mib = ops.ONE_PER_SM_MIB << 20
    per_key = 8 * 128 * 4  # Hkv 8, D 128: K and V in bf16
    assert ops.choose_num_splits(2048, 1, 8) == 132 // 8 == 16
    assert ops.choose_num_splits(mib // per_key, 1, 8) == 16  # exactly at the limit: one per SM
    assert ops.choose_num_splits(mib // per_key + 16, 1, 8) == ops.MAX_SPLITS  # past it: two per SM
    assert ops.choose_num_splits(8192, 1, 8) == ops.MAX_SPLITS
    assert ops.choose_num_splits(8192, 1, 8, D=64) == 16  # half the bytes a key
    assert ops.choose_num_splits(2048, 2, 8) == 132 // 16  # two rows of 2048 keys: 16 MiB, one per SM
    assert ops.choose_num_splits(4096, 2, 8) == 2 * 132 // 16  # two rows of 4096 keys: 32 MiB, two per SM
    # another GPU's SMs: one (or two) CTAs on each of its SMs, and the limit is per SM
    assert ops.choose_num_splits(2048, 1, 8, num_sms=114) == 114 // 8 == 14
    assert ops.choose_num_splits(mib // per_key, 1, 8, num_sms=114) == 2 * 114 // 8  # past 114/132 of it
    assert ops.choose_num_splits(mib // per_key * 114 // 132, 1, 8, num_sms=114) == 14
    with pytest.raises(ValueError, match="num_sms=0"):
        ops.choose_num_splits(2048, 1, 8, num_sms=0)
    monkeypatch.setenv("FIXEDGRAPH_ATTN_ONE_PER_SM_MIB", "0")
    assert ops.choose_num_splits(2048, 1, 8) == 32
    monkeypatch.setenv("FIXEDGRAPH_ATTN_ONE_PER_SM_MIB", "-1")
    with pytest.raises(ValueError, match="FIXEDGRAPH_ATTN_ONE_PER_SM_MIB='-1'"):
        ops.choose_num_splits(2048, 1, 8)


# ---- fused QK-norm + RoPE + KV write + decode (paged_attention_decode_rope_d*) ----------------

ROPE_CASES = sorted(n for n in CASES if n.startswith("attention_decode_rope_"))


def _two_launch(case: KernelCase) -> KernelCase:
    """The fused case's buffers under qk_norm_rope_kv + attention_decode (the unfused path)."""
    from fixedgraph.ops.rope_kv import qk_norm_rope_kv

    (fused,) = case.program.launches
    (out, _, _, _, qkv, q_norm, k_norm, rope, positions, slots, k_pool, v_pool, block_table,
     seq_len, rows, max_blocks, block_size, Hq, Hkv, D, S, scale, eps) = fused.args
    bufs = dict(case.buffers)
    bufs["q"] = Buffer(np.full((rows, Hq * D), 0x7FC1, np.uint16), "bf16")
    prog = Program(f"{case.name}_unfused")
    qk_norm_rope_kv(prog, qkv, Ref("q"), None if isinstance(q_norm, Null) else q_norm,
                    None if isinstance(k_norm, Null) else k_norm, rope, positions, slots, k_pool,
                    v_pool, rows, Hq, Hkv, D, eps)
    scratch = {n: Ref(n) for n in case.buffers if n.startswith("attn_split")}
    if "_st_d" in fused.entry:  # tiles shared: its twin is one softmax over the keys, as one split's
        scratch, S = {}, 1
    ops.attention_decode(prog, out, Ref("q"), k_pool, v_pool, block_table, seq_len, scratch or None,
                         rows, max_blocks, block_size, Hq, Hkv, D, scale, S)
    return KernelCase(case.name, prog, bufs, case.outputs, case.reference)


@pytest.mark.parametrize("name", ROPE_CASES)
def test_rope_fused_equals_two_launches_bit_for_bit(name, rng):
    case = CASES[name](rng)
    fused = run_case(case, ReferenceDevice())
    unfused = run_case(_two_launch(case), ReferenceDevice())
    for out in case.outputs:
        np.testing.assert_array_equal(fused[out], unfused[out], err_msg=f"{name}: {out}")


def test_rope_case_catches_a_missing_kv_write(rng):
    # Negative control: with every slot -1 nothing is written and each row reads its current
    # token's pool slot, which the case poisons with NaN.
    case = CASES["attention_decode_rope_r3_bs16_h32kv8_d128_s7_norm"](rng)
    slots = np.full_like(case.buffers["slots"].data, -1)
    got = run_case(_with(case, slots=slots), ReferenceDevice())
    want = case.reference(inputs_of(case))
    for out in ("out", "k_pool", "v_pool"):
        assert compare(out, got[out], want[out], case.outputs[out]), out


def test_rope_case_catches_a_misplaced_kv_write(rng):
    # Slots one token late: the pools differ, though the CTA's own k/v still feed attention.
    case = CASES["attention_decode_rope_r1_bs16_h16kv8_d128_s2_norm"](rng)
    slots = case.buffers["slots"].data + 1
    got = run_case(_with(case, slots=slots), ReferenceDevice())
    want = case.reference(inputs_of(case))
    assert compare("k_pool", got["k_pool"], want["k_pool"], case.outputs["k_pool"])
    assert compare("out", got["out"], want["out"], case.outputs["out"]) is None


def test_rope_current_token_comes_from_the_cta_not_the_pool(rng):
    # The current token's pool slot is NaN before the launch and seq_len 1 attends only that key:
    # the result is finite only if the key is taken from the CTA (the write lands elsewhere here).
    case = CASES["attention_decode_rope_r1_bs16_h12kv1_d64_s1_norm"](rng)
    slot = int(case.buffers["slots"].data[0])
    k_pool = case.buffers["k_pool"].data.copy()
    assert np.all(k_pool.reshape(-1, 64)[slot] == 0x7FC0)
    nan_slot = k_pool.reshape(-1, 64).shape[0] - 1  # in the all-NaN block: never read
    got = run_case(_with(case, slots=np.array([nan_slot], np.int64)), ReferenceDevice())
    assert np.isfinite(got["out"]).all()


def _rope_refs() -> list[Ref]:
    """Stand-ins for attention_decode_rope's region arguments (out .. seq_len)."""
    return [Ref(n) for n in ("o", "qkv", "qn", "kn", "rope", "pos", "slot", "k", "v", "bt", "sl")]


def test_rope_decode_launch():
    prog = Program("p")
    scratch = {n: Ref(n) for n in ops.decode_scratch(4, 32, 128, 7, 8)}
    refs = _rope_refs()
    ops.attention_decode_rope(prog, *refs, scratch, 4, 64, 16, 32, 8, 128, 0.088, 1e-6, 7)
    (l,) = prog.launches
    # G = 4: the default heads-on-N form (choose_swap)
    assert (l.entry, l.grid, l.block) == ("paged_attention_decode_rope_swp_d128", (8, 4, 7), (128, 1, 1))
    assert l.shared == ops.decode_shared_bytes(128)
    assert l.args[:5] == (Ref("o"), Ref(ops.SCRATCH_O), Ref(ops.SCRATCH_ML), Ref(ops.SCRATCH_COUNT), Ref("qkv"))
    assert l.args[-3:] == (7, 0.088, 1e-6)
    prog1 = Program("p1")
    ops.attention_decode_rope(prog1, refs[0], refs[1], None, None, *refs[4:], None, 1, 64, 16, 16, 8,
                              64, 0.125, 1e-6, 1)
    assert all(isinstance(a, Null) for a in prog1.launches[0].args[1:4] + prog1.launches[0].args[5:7])
    with pytest.raises(ValueError, match="head_dim 256 is not supported"):
        ops.attention_decode_rope(Program("p"), *refs, None, 1, 4, 16, 8, 8, 256, 0.1, 1e-6, 1)
    with pytest.raises(ValueError, match="needs scratch regions"):
        ops.attention_decode_rope(Program("p"), *refs, None, 1, 4, 16, 8, 8, 128, 0.1, 1e-6, 3)


def _divmod_by_multiply(n: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """attn::divmod (attention.cuh) in numpy: q' = umulhi(n, floor((2^32 - 1) / d)), one fix-up."""
    m = np.uint64(0xFFFFFFFF // d)
    q = (n.astype(np.uint64) * m) >> np.uint64(32)
    r = n.astype(np.int64) - q.astype(np.int64) * d
    fix = r >= d
    return q.astype(np.int64) + fix, r - d * fix


@pytest.mark.parametrize("d", [1, 2, 3, 5, 7, 12, 16, 24, 100, 1000, 4096, 65537, 2**31 - 1])
def test_block_division_by_multiply_is_exact(d, rng):
    """The decode kernels divide key indices (< 2^31) by the block size with a multiply: exact
    for every block size, at block edges, at the largest key, and on random keys."""
    edges = np.arange(1, 64, dtype=np.int64) * d
    n = np.concatenate([np.array([0, 1, 2**31 - 1, 2**31 - 2], dtype=np.int64),
                        edges - 1, edges, edges + 1,
                        rng.integers(0, 2**31, 100_000, dtype=np.int64)])
    n = n[(n >= 0) & (n < 2**31)]
    q, r = _divmod_by_multiply(n, d)
    np.testing.assert_array_equal(q, n // d)
    np.testing.assert_array_equal(r, n % d)


def test_min_keys_knob(monkeypatch):
    """FIXEDGRAPH_ATTN_MIN_KEYS changes how many splits a context bucket plans; garbage is refused."""
    assert ops.choose_num_splits(512, 1, 8) == 512 // ops.MIN_KEYS_PER_SPLIT
    monkeypatch.setenv("FIXEDGRAPH_ATTN_MIN_KEYS", "32")
    assert ops.choose_num_splits(512, 1, 8) == 16
    monkeypatch.setenv("FIXEDGRAPH_ATTN_MIN_KEYS", "0")
    with pytest.raises(ValueError, match="FIXEDGRAPH_ATTN_MIN_KEYS='0'"):
        ops.choose_num_splits(512, 1, 8)


def test_max_splits_knob(monkeypatch):
    """FIXEDGRAPH_ATTN_MAX_SPLITS caps the splits of long contexts only; garbage is refused."""
    assert ops.choose_num_splits(32768, 1, 8) == ops.MAX_SPLITS
    monkeypatch.setenv("FIXEDGRAPH_ATTN_MAX_SPLITS", "16")
    assert ops.choose_num_splits(32768, 1, 8) == 16
    assert ops.choose_num_splits(512, 1, 8) == 512 // ops.MIN_KEYS_PER_SPLIT  # 8: under the cap
    monkeypatch.setenv("FIXEDGRAPH_ATTN_MAX_SPLITS", "x")
    with pytest.raises(ValueError, match="FIXEDGRAPH_ATTN_MAX_SPLITS='x'"):
        ops.choose_num_splits(32768, 1, 8)


def test_long_merge_entry_choice(monkeypatch):
    # d128 from LONG_MERGE_MIN_SPLITS splits takes the long-context entry; other head dims, fewer
    # splits and FIXEDGRAPH_ATTN_LONG_MERGE=0 keep the short one
    n = ops.LONG_MERGE_MIN_SPLITS
    assert ops.decode_rope_entry(128, n) == "paged_attention_decode_rope_long_d128"
    assert ops.decode_rope_entry(128, n - 1) == "paged_attention_decode_rope_d128"
    assert ops.decode_rope_entry(64, 32) == "paged_attention_decode_rope_d64"
    monkeypatch.setenv("FIXEDGRAPH_ATTN_LONG_MERGE", "0")
    assert ops.decode_rope_entry(128, 32) == "paged_attention_decode_rope_d128"


def test_smem_pad_knob(monkeypatch):
    # FIXEDGRAPH_ATTN_SMEM_PAD_KB adds unused shared memory to the fused decode launch (placement
    # A/Bs); garbage is refused, naming it
    refs = _rope_refs()
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SMEM_PAD_KB", "40")
    prog = Program("p")
    ops.attention_decode_rope(prog, *refs, None, 1, 64, 16, 16, 8, 128, 0.088, 1e-6, 1)
    assert prog.launches[0].shared == ops.decode_shared_bytes(128) + 40 * 1024
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SMEM_PAD_KB", "-1")
    with pytest.raises(ValueError, match="FIXEDGRAPH_ATTN_SMEM_PAD_KB='-1'"):
        ops.attention_decode_rope(Program("q"), *refs, None, 1, 64, 16, 16, 8, 128, 0.088, 1e-6, 1)


def test_swap_knob(monkeypatch):
    # FIXEDGRAPH_ATTN_SWAP: 3 (the default) takes _swp at every head dim and split count for GQA
    # groups of at most 8, 2 only at d128's short entry (plain at other head dims, 24+ splits),
    # 1 _sw at every head dim and split count; larger groups always plain; 0 never; garbage is
    # refused. (With the tile-sharing entry off: from 24 splits it takes the place of these.)
    monkeypatch.setenv("FIXEDGRAPH_ATTN_STEAL", "0")
    refs = _rope_refs()

    def entries(*splits):
        prog = Program("p")
        for S in splits:
            scratch = {n: Ref(n) for n in ops.decode_scratch(1, 16, 128, S, 8)} or None
            ops.attention_decode_rope(prog, *refs, scratch, 1, 64, 16, 16, 8, 128, 0.088, 1e-6, S)
        ops.attention_decode_rope(prog, *refs, None, 1, 64, 16, 16, 8, 128, 0.088, 1e-6, 1, swap=False)
        return [l.entry for l in prog.launches]

    monkeypatch.setenv("FIXEDGRAPH_ATTN_SWAP", "2")
    assert ops.choose_swap(128, 16, 8) == ops.choose_swap(128, 64, 8, 23) == "swp"
    assert ops.choose_swap(128, 16, 8, 24) == ops.choose_swap(128, 72, 8) == ""
    assert ops.choose_swap(64, 9, 3) == ops.choose_swap(96, 16, 4) == ""
    assert ops.decode_rope_entry(128, 16, "swp") == "paged_attention_decode_rope_swp_d128"
    assert ops.decode_rope_entry(128, 32, "swp") == "paged_attention_decode_rope_long_swp_d128"
    assert ops.decode_rope_entry(64, 4, "swp") == "paged_attention_decode_rope_swp_d64"
    assert ops.decode_rope_entry(128, 16, True) == ops.decode_rope_entry(128, 16, "sw") == \
        "paged_attention_decode_rope_sw_d128"
    with pytest.raises(ValueError, match="swap='swap'"):
        ops.decode_rope_entry(64, 4, "swap")
    assert entries(1, 32) == ["paged_attention_decode_rope_swp_d128", "paged_attention_decode_rope_long_d128",
                              "paged_attention_decode_rope_d128"]
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SWAP", "1")
    assert ops.choose_swap(128, 16, 8) == ops.choose_swap(128, 8, 8) == ops.choose_swap(128, 64, 8, 32) == "sw"
    assert ops.choose_swap(128, 72, 8) == "" and ops.choose_swap(64, 9, 3) == ops.choose_swap(96, 16, 4) == "sw"
    assert ops.decode_rope_entry(128, 32, True) == "paged_attention_decode_rope_long_sw_d128"
    assert ops.decode_rope_entry(64, 32, True) == "paged_attention_decode_rope_sw_d64"
    assert entries(1, 32) == ["paged_attention_decode_rope_sw_d128", "paged_attention_decode_rope_long_sw_d128",
                              "paged_attention_decode_rope_d128"]
    monkeypatch.delenv("FIXEDGRAPH_ATTN_SWAP", raising=False)
    assert ops.choose_swap(128, 16, 8, 32) == ops.choose_swap(64, 9, 3) == ops.choose_swap(96, 16, 4) == "swp"
    assert ops.choose_swap(128, 72, 8) == ""
    assert entries(1, 32) == ["paged_attention_decode_rope_swp_d128", "paged_attention_decode_rope_long_swp_d128",
                              "paged_attention_decode_rope_d128"]
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SWAP", "0")
    assert ops.choose_swap(128, 16, 8) == ""
    assert entries(1) == ["paged_attention_decode_rope_d128"] * 2
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SWAP", "yes")
    with pytest.raises(ValueError, match="FIXEDGRAPH_ATTN_SWAP='yes'"):
        ops.choose_swap(128, 16, 8)


def test_steal_entries_are_planned_only_where_they_apply(monkeypatch):
    # FIXEDGRAPH_ATTN_STEAL: on by default (1), from STEAL_MIN_SPLITS splits where the entry fits
    # (head dim 128, one pass of query heads, the block table in shared memory); steal=True
    # insists and is refused with the reason; the launch carries the block table's shared bytes.
    def rope(S, Hq=32, Hkv=8, max_blocks=2048, steal=None):
        prog = Program("r")
        scratch = {n: Ref(n) for n in ops.decode_scratch(1, Hq, 128, S, Hkv)} or None
        ops.attention_decode_rope(prog, Ref("o"), Ref("qkv"), None, None, Ref("rope"), Ref("pos"), Ref("sl"),
                                  Ref("k"), Ref("v"), Ref("bt"), Ref("len"), scratch, 1, max_blocks, 16, Hq,
                                  Hkv, 128, 0.088, 1e-6, S, steal=steal)
        return prog.launches[0]

    def plain(S, Hq=32, Hkv=8, max_blocks=2048, steal=False, swap=False):
        prog = Program("p")
        scratch = {n: Ref(n) for n in ops.decode_scratch(1, Hq, 128, S, Hkv)} or None
        ops.attention_decode(prog, Ref("o"), Ref("q"), Ref("k"), Ref("v"), Ref("bt"), Ref("len"), scratch, 1,
                             max_blocks, 16, Hq, Hkv, 128, 0.088, S, steal=steal, swap=swap)
        return prog.launches[0]

    monkeypatch.setenv("FIXEDGRAPH_ATTN_STEAL", "0")
    assert ops.steal_mode() == "0"
    assert rope(32).entry == "paged_attention_decode_rope_long_swp_d128"
    monkeypatch.delenv("FIXEDGRAPH_ATTN_STEAL", raising=False)  # the default: on, d128 from 24 splits
    assert ops.steal_mode() == "1"
    assert plain(32).entry == "paged_attention_decode_d128"  # the plain entry shares only when asked
    st = rope(32)
    assert st.entry == "paged_attention_decode_rope_long_st_d128"
    assert st.shared == ops.decode_shared_bytes(128) + 4 * 2048
    assert plain(24, steal=None).entry == "paged_attention_decode_st_d128"
    assert plain(24, steal=None).shared == ops.decode_shared_bytes(128) + 8192
    assert rope(16).entry == "paged_attention_decode_rope_swp_d128"  # below STEAL_MIN_SPLITS
    assert rope(32, Hq=72, Hkv=8).entry == "paged_attention_decode_rope_long_d128"  # G = 9 > 8: two passes
    assert plain(32, Hq=72, Hkv=8, steal=None).entry == "paged_attention_decode_st_d128"  # 16 heads a pass
    assert rope(32, max_blocks=9000).entry == "paged_attention_decode_rope_long_swp_d128"  # 36 KB of table
    assert plain(32, swap=True).entry == "paged_attention_decode_sw_d128"
    monkeypatch.setenv("FIXEDGRAPH_ATTN_STEAL", "2")  # wherever it fits: any split count and head dim
    assert rope(16).entry == "paged_attention_decode_rope_st_d128"
    assert rope(16).shared == ops.decode_shared_bytes(128) + 4 * 2048
    assert plain(8, steal=None).entry == "paged_attention_decode_st_d128"
    assert rope(32).entry == "paged_attention_decode_rope_long_st_d128"
    assert rope(32, Hq=72, Hkv=8).entry == "paged_attention_decode_rope_long_d128"  # still one pass only
    assert ops.steal_rope_entry(64, 40) == "paged_attention_decode_rope_st_d64"
    with pytest.raises(ValueError, match="head_dim 256"):
        ops.steal_rope_entry(256, 4)
    monkeypatch.setenv("FIXEDGRAPH_ATTN_STEAL", "0")
    assert rope(32).entry == "paged_attention_decode_rope_long_swp_d128"
    assert rope(4, steal=True).entry == "paged_attention_decode_rope_st_d128"  # insisted: any S
    with pytest.raises(ValueError, match="GQA group of 9"):
        rope(32, Hq=72, Hkv=8, steal=True)
    with pytest.raises(ValueError, match="max_blocks=9000"):
        plain(32, max_blocks=9000, steal=True)
    with pytest.raises(ValueError, match="swap and steal"):
        plain(32, steal=True, swap=True)
    monkeypatch.setenv("FIXEDGRAPH_ATTN_STEAL", "yes")
    with pytest.raises(ValueError, match="FIXEDGRAPH_ATTN_STEAL='yes'"):
        ops.steal_mode()

#!/usr/bin/env python3
"""Kernel speed against the memory floor, one kernel at a time (issue 4's per-kernel targets).

    python tools/bench_kernels.py [--json out.json] [--smoke]

GEMV (plain and fused) on the weight shapes of Qwen3-0.6B, Qwen3-8B, Llama-3-8B, Qwen2.5-7B and Qwen3-14B, batch 1
(``--gemv-defer 0 1 2``: the norm GEMVs under each row entry form of FIXEDGRAPH_NORM_DEFER, side by side);
paged decode attention at 4k-32k keys (Hkv 8, D 128, GQA 4). Each case is a graph of many
launches over rotating copies of the operands (more bytes than L2 holds), timed with events;
the table gives µs per launch, GB/s and the fraction of the copy bandwidth measured in the same
run, and beside it the read floor of the same bytes: ``read_probe``, a launch that only streams
them, chained the same way (the "of read" column: the read floor's µs over the kernel's; a launch
of a few MB cannot reach the copy bandwidth of 4 GiB; ``--no-read`` skips it). ``--smoke`` runs
tiny shapes on the reference backend to check the programs only. ``--only chain [--chain-model
qwen3-0.6b] [--chain-ctx 128] [--chain-variant ...]``: the launch structure's floor, a decode step
as a chain of launches that each only read that launch's bytes (late and early PDL signals), and
early ones that also hand the step's vectors over after their wait (hand, handnorm: with a CTA-wide
reduction over the vector, as the GEMVs' norm), against the bytes' floor.
Three attention probes run beside each context: ``attn_rows8_hkv1`` (the same bytes and CTAs with
each CTA's K/V of a block contiguous: the pool layout's cost), ``attention_decode_seqbt``
(blocks in pool order instead of shuffled: the block table's) and ``attention_decode_l2`` (the
same launches over one copy of the K/V, which L2 keeps between launches while it fits, up to
~8k keys: the kernel's time without DRAM round trips). ``--ctx 32768`` times one context,
e.g. under ``ncu``; ``--attn-hq 16``: Qwen3-0.6B's GQA 2 instead of 4; ``--attn-swap``: also the
heads-on-N entry (``attention_decode_sw``, ``_sw_l2``). ``--only staging
[--staging-kb 48 96 190]``: how fast one CTA per SM brings that much global memory into its
shared memory, by method (bulk copies by 1-16 issuing threads in 4-64 KiB chunks, cp.async,
register loads), as aggregate and per-SM GB/s. ``--only hol
[--hol-kb 0 32 96]``: the latency of L2-hit loads and the issue time of a CTA's copies while that
much of them is in flight from DRAM (cp.async from every thread, or bulk copies). ``--only
bcast``: how long 1-396 CTAs take to read one small row (4 or 16 KiB, or 16 replicas of it)
right after their PDL wait, as a decode GEMV's CTAs read the residual row. ``--only icache``:
how long a CTA's first 2, 8 or 32 KB of code after its PDL wait take when that code is cold in
the SM's instruction caches (icache_flush ran ~267 KB of code just before) against warm (the
same probe ran just before), per KB: the price of the decode kernels' 20-60 KB of SASS each.
``--only handoff``: what one kernel-to-kernel handoff costs as a PDL wait (the predecessor grid
completed) against a flag its last CTA publishes (successors launched early, polling), over
chains of 64-396 CTAs a grid that each read what the grid before wrote. ``--only persist
[--persist-model qwen3-0.6b] [--persist-warps 8 16] [--persist-slot-kb 16 32] [--persist-handoff
count flag ll] [--persist-pairs 0 1] [--persist-control none nostream nomarks quiet evict
quiet+evict] [--persist-stages 32 3]``: a decode step's GEMVs (a model's four shapes x 28 layers)
as one persistent launch (persist_probe: one CTA an SM, a loader warp streaming every op's rows
through a ring of shared-memory stages, ops handed over by global counters or LL words) against the decode graph's launches
of the same shapes, with each op's handover, work and arrival from in-kernel marks.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixedgraph import bf16  # noqa: E402
from fixedgraph.backends import get_device  # noqa: E402
from fixedgraph.backends.reference.twins.runtime_test import (  # noqa: E402
    ICACHE_FMAS, chase_ends, hand_words, handoff_chain, icache_sums, persist_gemv, persist_ops, read_sums)
from fixedgraph.layout import ArenaPlan  # noqa: E402
from fixedgraph.ops import attention, gemv  # noqa: E402
from fixedgraph.program import Null, Program, Ref  # noqa: E402

L2_BYTES = 60 << 20
GEMV_SHAPES = {  # (N, K) per model: qkv, o_proj, gate_up, down
    "qwen3-0.6b": [(4096, 1024), (1024, 2048), (6144, 1024), (1024, 3072)],
    "qwen3-8b": [(6144, 4096), (4096, 4096), (24576, 4096), (4096, 12288)],
    "llama3-8b": [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)],
    # one-round gate_up plans that leave SMs uneven: 296 / 272 CTAs on 132 SMs at the default split
    "qwen2.5-7b": [(4608, 3584), (3584, 3584), (37888, 3584), (3584, 18944)],
    "qwen3-14b": [(7168, 5120), (5120, 5120), (34816, 5120), (5120, 17408)],
}


def copies_for(nbytes: int, smoke: bool) -> int:
    return 2 if smoke else max(2, -(-3 * L2_BYTES // nbytes))


def fill(arena, name: str, rng) -> None:
    r = arena.plan[name]
    n = r.numel
    if r.dtype == "bf16":
        arena.write(name, bf16.from_f32(rng.standard_normal(min(n, 1 << 22)).astype(np.float32) * 0.05)
                    .repeat(-(-n // min(n, 1 << 22)))[:n].reshape(r.shape))
    else:
        arena.write(name, rng.standard_normal(n).astype(np.float32).reshape(r.shape))


# the launch kinds of each GEMV_SHAPES row: norm + qkv, o_proj, norm + gate_up + SiLU, down (and
# the plain GEMV on the fused shapes, for the cost of the fusion)
GEMV_KINDS = (("rmsnorm", "plain"), ("plain",), ("rmsnorm_silu", "plain"), ("plain",))


def add_gemv(prog: Program, kind: str, w: Ref, N: int, K: int, split: int | None, defer: int | None = None) -> None:
    """One launch of ``kind`` (plain | rmsnorm | rmsnorm_silu, N = 2I rows | silu) over weight ``w``
    [N, K], with bench_gemv's region names for its other operands. defer: the norm kinds' row entry
    form (gemv.norm_defer_mode; None: FIXEDGRAPH_NORM_DEFER)."""
    if kind == "plain":
        gemv.gemv(prog, Ref("out"), Ref("x"), w, None, 1, N, K, split=split)
    elif kind == "rmsnorm":
        gemv.gemv_rmsnorm(prog, Ref("out"), Ref("h0"), Ref("x"), Ref("h1"), Ref("nw"), w, None, 1, N, K, 1e-6,
                          split=split, defer=defer)
    elif kind == "rmsnorm_silu":
        gemv.gemv_rmsnorm_silu(prog, Ref("out"), Ref("h0"), Ref("x"), Ref("h1"), Ref("nw"), w, None, 1,
                               N // 2, K, 1e-6, split=split, defer=defer)
    else:
        gemv.gemv_silu(prog, Ref("out"), Ref("gu"), w, None, 1, N, K, split=split)


def gemv_operands(dev, shapes, rng):
    """An arena of filled GEMV operands under add_gemv's names: weights w0, w1, ... of ``shapes``
    ((N, K) each), and x, h0, h1, gu, nw, out wide enough for the largest of them."""
    kmax, nmax = max(K for _, K in shapes), max(N for N, _ in shapes)
    plan = ArenaPlan()
    for j, (N, K) in enumerate(shapes):
        plan.add(f"w{j}", (N, K), "bf16")
    plan.add("x", (1, kmax), "bf16")
    plan.add("h0", (1, kmax), "f32")
    plan.add("h1", (1, kmax), "f32")
    plan.add("gu", (1, 2 * kmax), "bf16")
    plan.add("nw", (kmax,), "bf16")
    plan.add("out", (1, nmax), "bf16")
    arena = dev.arena(plan)
    for name in plan.regions:
        fill(arena, name, rng)
    return arena


def bench_gemv(dev, N: int, K: int, kind: str, smoke: bool, rng, splits=(None,), defers=(None,)) -> list[dict]:
    """One launch kind on one weight shape, timed for each k split in ``splits`` (None: the
    launcher's choice) and, for the norm kinds, each row entry form in ``defers`` (None: the
    knob's; 1 / 2 label their rows _dn / _dw). kind: plain | rmsnorm | rmsnorm_silu (N = 2I
    rows) | silu."""
    wbytes = N * K * 2
    c = copies_for(wbytes, smoke)
    arena = gemv_operands(dev, [(N, K)] * c, rng)
    out = []
    for defer in (defers if kind.startswith("rmsnorm") else (None,)):
        for split in splits:
            prog = Program(f"gemv.{kind}.{N}x{K}.s{split}.d{defer}")
            for i in range(c):
                add_gemv(prog, kind, Ref(f"w{i}"), N, K, split, defer)
            a = prog.launches[0]  # its split: before (eps, mode) on the row entries, before eps on the others
            S = a.args[-1 if kind in ("plain", "silu") else -3 if a.entry in gemv.ROW_ENTRIES else -2]
            tag = {"gemv_rmsnorm_bf16_row_dn": "_dn", "gemv_rmsnorm_bf16_row_dw": "_dw"}.get(a.entry, "")
            out.append({"kernel": f"gemv_{kind}{tag}", "shape": f"{N}x{K}", "split": S, "default": split is None,
                        "bytes": wbytes, "entry": a.entry, **time_program(dev, prog, arena, c, smoke, free=False)})
    if not smoke:
        dev.free(arena.base)
    return out


def split_candidates(N: int, K: int, kind: str = "plain") -> list:
    """None (the launcher's own choice), then every k split that launch kind accepts: a plain
    launch may run narrower CTAs than gemv_warps (plain_warps), so its splits stop lower."""
    warps = gemv.plain_warps(N, K) if kind == "plain" else gemv.gemv_warps(N, K)
    kblocks = -(-K // 32)
    return [None] + [s for s in (1, 2, 4, 8, 16) if s <= warps and kblocks >= 2 * s]


def bench_attention(dev, ctx: int, smoke: bool, rng, Hq: int = 32, Hkv: int = 8, D: int = 128, bs: int = 16,
                    rows: int = 1, shuffle: bool = True, l2_resident: bool = False, swap: bool = False,
                    steal: bool = False) -> dict:
    """Decode attention of ``rows`` rows of ``ctx`` keys each. rows > 1 with Hkv = 1 is the
    layout probe: the same bytes and CTAs as one row of rows kv heads, but each CTA's K/V of a
    block is contiguous (block_size * D * 2 bytes) instead of D * 2-byte runs at a Hkv * D stride.
    ``l2_resident``: every launch reads one copy of the K/V, which stays in L2 from launch to
    launch while it fits (the L2 probe: is the kernel's time its DRAM round trips?). ``swap``: the
    ``_sw`` entry (query heads on the MMA's N). ``steal``: the ``_st`` entry (tiles shared out at run
    time, the fused decode's scheme from 24 splits on)."""
    nblocks = -(-ctx // bs)
    kv_bytes = rows * ctx * Hkv * D * 2 * 2
    launches = copies_for(kv_bytes, smoke)
    c = 1 if l2_resident else launches
    S = attention.choose_num_splits(ctx, rows, Hkv, D=D)
    plan = ArenaPlan()
    for i in range(c):
        plan.add(f"k{i}", (rows * nblocks + 1, bs, Hkv, D), "bf16")
        plan.add(f"v{i}", (rows * nblocks + 1, bs, Hkv, D), "bf16")
    plan.add("q", (rows, Hq * D), "bf16")
    plan.add("out", (rows, Hq * D), "bf16")
    plan.add("bt", (rows, nblocks), "i32")
    plan.add("len", (rows,), "i32")
    for name, (shape, dtype) in attention.decode_scratch(rows, Hq, D, S, Hkv).items():
        plan.add(name, shape, dtype)
    arena = dev.arena(plan)
    for name in plan.regions:
        if name.startswith(("k", "v", "q")):
            fill(arena, name, rng)
    order = rng.permutation(rows * nblocks) if shuffle else np.arange(rows * nblocks)
    arena.write("bt", (order + 1).astype(np.int32).reshape(rows, nblocks))
    arena.write("len", np.full(rows, ctx, np.int32))
    for name in attention.decode_scratch(rows, Hq, D, S, Hkv):
        arena.fill(name, 0)
    scratch = {n: Ref(n) for n in attention.decode_scratch(rows, Hq, D, S, Hkv)} or None
    prog = Program(f"attention.{ctx}")
    for i in range(launches):
        attention.attention_decode(prog, Ref("out"), Ref("q"), Ref(f"k{i % c}"), Ref(f"v{i % c}"), Ref("bt"),
                                   Ref("len"), scratch, rows, nblocks, bs, Hq, Hkv, D, D ** -0.5, S, swap=swap,
                                   steal=steal)
    kernel = (("attention_decode" if rows == 1 else f"attn_rows{rows}_hkv{Hkv}") + ("" if shuffle else "_seqbt")
              + ("_sw" if swap else "") + ("_st" if steal else "") + ("_l2" if l2_resident else "")
              + ("" if D == 128 else f"_d{D}"))
    return {"kernel": kernel, "shape": f"ctx {ctx} S {S}", "bytes": kv_bytes,
            **time_program(dev, prog, arena, launches, smoke)}


READ_CTAS_PER_SM = (2, 1, 4)  # read floor grids, CTAs of READ_THREADS an SM; the first is the row's default
READ_THREADS = 512


def random_words(rng, n: int) -> np.ndarray:
    """n random u32 words (a 16 MiB random block repeated: the probes' sources, checked by checksum)."""
    return np.resize(rng.integers(0, 1 << 32, size=min(n, 1 << 22), dtype=np.uint64).astype(np.uint32), n)


def bench_read(dev, nbytes: int, smoke: bool, rng) -> list[dict]:
    """The read floor of one launch of ``nbytes``: ``read_probe`` (ptx/src/runtime_test.cu), a grid
    that only streams those bytes with 16-byte loads, chained by PDL over rotating copies as the
    kernels it stands beside, at READ_CTAS_PER_SM grids. What a launch of that size can reach, ramp
    and tail included, as against the copy bandwidth of 4 GiB (the kernels' "of read" column)."""
    n16 = max(1, nbytes // 16)
    c = copies_for(16 * n16, smoke)
    sms = 2 if smoke else int(dev.properties()["sm_count"])
    grids = [k * sms for k in (READ_CTAS_PER_SM[:1] if smoke else READ_CTAS_PER_SM)]
    plan = ArenaPlan()
    for i in range(c):
        plan.add(f"src{i}", (4 * n16,), "u32")
    plan.add("sum", (max(grids),), "u32")
    arena = dev.arena(plan)
    words = random_words(rng, 4 * n16)
    for i in range(c):
        arena.write(f"src{i}", words)
    out = []
    for G in grids:
        prog = Program(f"read.{nbytes}.g{G}")
        for i in range(c):
            prog.launch("read_probe", (G,), (READ_THREADS,), [Ref(f"src{i}"), Ref("sum"), n16])
        r = time_program(dev, prog, arena, c, smoke, free=False)
        if not np.array_equal(arena.read("sum")[:G], read_sums(words, G, READ_THREADS)):  # every copy holds words
            raise RuntimeError(f"read_probe over {nbytes} bytes at {G} CTAs: the checksums are wrong")
        out.append({"kernel": "read", "shape": f"{nbytes / 1e6:.1f} MB", "split": G // sms, "default": G == grids[0],
                    "bytes": 16 * n16, **r})
    if not smoke:
        dev.free(arena.base)
    return out


def step_reads(model: str, ctx: int) -> list[tuple[str, int, int]]:
    """What each launch of ``model``'s decode step must read at ``ctx`` keys, in step order (per
    layer norm + qkv, attention, o_proj, norm + gate_up, down; then the head): (name, bytes of
    weights or K/V, bytes of the vector it takes from the launch before it: the hidden state, qkv,
    attention's output, the MLP's activation, in bf16). The shapes come from the model's config
    (fixedgraph.testing.checkpoints.CONFIGS)."""
    from fixedgraph.testing.checkpoints import CONFIGS

    c = CONFIGS[model][1]
    H, I, L, V = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    nh, nkv = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"])
    hd = c.get("head_dim") or H // nh
    qkv = (nh + 2 * nkv) * hd
    layer = [("qkv", qkv * H * 2, H * 2), ("attention", ctx * nkv * hd * 2 * 2, qkv * 2),
             ("o_proj", H * nh * hd * 2, nh * hd * 2), ("gate_up", 2 * I * H * 2, H * 2), ("down", H * I * 2, I * 2)]
    return layer * L + [("head", V * H * 2, H * 2)]


CHAIN_VARIANTS = ("late", "early", "hand", "handnorm")  # bench_chain's launch kinds (see there)


def bench_chain(dev, model: str, ctx: int, variant: str, smoke: bool, rng,
                ctas_per_sm: int = READ_CTAS_PER_SM[0]) -> dict:
    """The launch structure's floor: one decode step of ``model`` at ``ctx`` keys as a chain of
    read-probe launches that each only stream what that launch of the step must read, from its
    own buffer (the step's bytes once, as the weights: more than L2 holds), one graph a step,
    steps back to back as the decode replays them. ``variant``:

    - ``late``: ``read_probe`` (wait, then read);
    - ``early``: ``read_probe_early`` (each launch signals its successor at its start and reads
      before its wait, as the lean GEMV entries preload their weights);
    - ``hand``: ``read_probe_hand`` mode 0, ``early`` plus the handover after the wait: each launch
      reads the vector its predecessor left (the size the step's launch takes: the hidden state,
      qkv, ...) and leaves the next one's, spread over its CTAs as a GEMV's outputs;
    - ``handnorm``: mode 1, ``hand`` with every CTA reading the whole vector and reducing it
      across the CTA before its stores (the GEMV's norm).

    Against the bytes' floor at the copy bandwidth and the model's ms/token from tools/bench.py:
    what five launches a layer of these sizes cost before any kernel does its own work, and how
    much of the rest the handover takes."""
    reads = step_reads(model, ctx)
    entry = {"late": "read_probe", "early": "read_probe_early"}.get(variant, "read_probe_hand")
    G = 2 if smoke else ctas_per_sm * int(dev.properties()["sm_count"])
    plan = ArenaPlan()
    for i, (_, nbytes, xbytes) in enumerate(reads):
        plan.add(f"r{i}", (max(1, nbytes // 16) * 4,), "u32")
        plan.add(f"x{i}", (max(1, xbytes // 16) * 4,), "u32")  # the vector launch i takes
    plan.add("sum", (G,), "u32")
    arena = dev.arena(plan)
    last = len(reads) - 1
    for i in range(last):
        arena.fill(f"r{i}", 0xA5)
    tail = random_words(rng, 4 * max(1, reads[last][1] // 16))
    arena.write(f"r{last}", tail)
    x0 = random_words(rng, 4 * max(1, reads[0][2] // 16))
    arena.write("x0", x0)
    for i in range(1, len(reads)):
        arena.fill(f"x{i}", 0x5A)
    prog = Program(f"chain.{model}.{ctx}.{variant}")
    xs = [max(1, x // 16) for _, _, x in reads]
    ys = [min(xs[(i + 1) % len(reads)], G * READ_THREADS) for i in range(len(reads))]  # the words launch i leaves
    mode = int(variant == "handnorm")
    for i, (_, nbytes, _) in enumerate(reads):
        args = [Ref(f"r{i}"), Ref("sum"), max(1, nbytes // 16)]
        if entry == "read_probe_hand":  # launch i takes x{i} and leaves x{i + 1} (the last: the first's)
            args += [Ref(f"x{i}"), Ref(f"x{(i + 1) % len(reads)}"), xs[i], ys[i], mode]
        prog.launch(entry, (G,), (READ_THREADS,), args)
    us = time_program(dev, prog, arena, 1, smoke, free=False)["us"]  # one graph launch = one step
    if not np.array_equal(arena.read("sum"), read_sums(tail, G, READ_THREADS)):
        raise RuntimeError(f"chain {model}: the head read's checksums are wrong")
    if entry == "read_probe_hand" and smoke:  # one replay: x0 went round the chain once
        x = x0
        for ny in ys:
            x = hand_words(x, ny, mode)
        if not np.array_equal(arena.read("x0")[:x.size], x):
            raise RuntimeError(f"chain {model} {variant}: the handed-over vectors are wrong")
    if not smoke:
        dev.free(arena.base)
    total = sum(b for _, b, _ in reads)
    return {"kernel": "chain", "shape": f"{model} ctx {ctx} {variant} {G} CTAs", "model": model, "ctx": ctx,
            "variant": variant, "early": variant != "late", "launches": len(reads), "bytes": total, "us": us}


STAGING_VARIANTS = (  # (label, mode, chunk bytes, issuing threads): see stage_probe in runtime_test.cu
    ("bulk 16K x1", 0, 16384, 1), ("bulk 16K x4", 0, 16384, 4), ("bulk 16K x12", 0, 16384, 12),
    ("bulk 4K x1", 0, 4096, 1), ("bulk 4K x16", 0, 4096, 16), ("bulk 64K x1", 0, 65536, 1),
    ("cp.async 16B", 1, 0, 0), ("ld.v4 -> st.shared", 2, 0, 0),
    # 256-byte rows 2 KiB apart: a kv head's keys in Qwen3's pools (8 kv heads x 128 dims x bf16)
    ("rows 2K cp.async", 3, 2048, 0),
    ("padrows 2K cp.async", 3, 2048, 272),  # ... into rows 272 bytes apart, as the attention's tiles
    # the same rows by one 256-byte cp.async.bulk each (no LDGSTS)
    ("bulkrows 2K", 4, 2048, 0), ("bulkpadrows 2K", 4, 2048, 272))
ROW_MODES = (3, 4)  # stage_probe modes that gather 256-byte rows
STAGING_MAX_STRIDE = max(chunk // 256 for _, mode, chunk, _ in STAGING_VARIANTS if mode in ROW_MODES)


def bench_staging(dev, nbytes: int, smoke: bool, rng, threads: int = 384, variants: str | None = None) -> list[dict]:
    """One CTA per SM (its shared memory holds ``nbytes``) stages ``nbytes`` of global memory
    into shared memory, by each method of STAGING_VARIANTS: the question behind the slab GEMVs'
    and the one-launch MLP block's slow phases (BENCHMARKS, session 10). Per launch: the span
    from the first CTA's start to the last CTA's end (%globaltimer in the kernel), so the
    launch's own latency is left out, and the median CTA's time: aggregate and per-SM GB/s.
    ``variants``: only the methods whose label starts with it (one kernel's launches, for ncu)."""
    G = 2 if smoke else int(dev.properties()["sm_count"])
    nbytes = nbytes // 256 * 256  # whole rows for the row-gather method
    per_launch = G * nbytes
    selected = [v for v in STAGING_VARIANTS if not variants or v[0].startswith(variants)]
    # the row-gather method reads its rows spread this far (only allocated when it runs)
    src_bytes = per_launch * (STAGING_MAX_STRIDE if any(v[1] in ROW_MODES for v in selected) else 1)
    c = copies_for(per_launch, smoke)
    plan = ArenaPlan()
    for i in range(c):
        plan.add(f"src{i}", (src_bytes // 4,), "u32")
        plan.add(f"ns{i}", (2 * G,), "u64")
        plan.add(f"sum{i}", (G,), "u32")
    arena = dev.arena(plan)
    for i in range(c):
        arena.write(f"src{i}", rng.integers(0, 1 << 32, size=src_bytes // 4, dtype=np.uint64).astype(np.uint32))
    out = []
    for label, mode, chunk, issuers in STAGING_VARIANTS:
        if (mode == 0 and -(-nbytes // chunk) > 64) or (variants and not label.startswith(variants)):
            continue
        prog = Program(f"staging.{label}")
        for i in range(c):
            prog.launch("stage_probe", (G,), (threads,), [Ref(f"src{i}"), Ref(f"ns{i}"), Ref(f"sum{i}"), nbytes, chunk,
                                                          issuers, mode],
                        shared=nbytes // 256 * (issuers or 256) if mode in ROW_MODES else nbytes)
        r = time_program(dev, prog, arena, c, smoke, free=False)
        words = arena.read(f"src{c - 1}")
        if mode in ROW_MODES:  # CTA b's rows: 64 words of every chunk // 4 from b * (nbytes // 256) rows on
            words = words[: G * nbytes // 256 * chunk // 4].reshape(G, nbytes // 256, chunk // 4)[:, :, :64]
        else:
            words = words[:per_launch // 4]
        want = np.bitwise_xor.reduce(words.reshape(G, -1), axis=1)
        if not np.array_equal(arena.read(f"sum{c - 1}"), want):
            raise RuntimeError(f"stage_probe {label}: the staged bytes' checksums are wrong")
        ns = arena.read(f"ns{c - 1}").astype(np.int64).reshape(G, 2)
        span = max(1, int(ns[:, 1].max() - ns[:, 0].min())) if not smoke else 1
        cta = float(np.median(ns[:, 1] - ns[:, 0])) if not smoke else 1.0
        out.append({"kernel": "staging", "shape": label, "bytes": per_launch, "cta_bytes": nbytes, **r,
                    "span_us": span / 1e3, "span_GBps": per_launch / span, "cta_median_us": cta / 1e3,
                    "per_sm_GBps": nbytes / max(cta, 1.0)})
    if not smoke:
        dev.free(arena.base)
    return out


PERSIST_HANDOFFS = ("count", "flag", "flag-nofence", "ll")  # persist_probe's flag argument, by index


def bench_persist(dev, model: str, layers: int, smoke: bool, rng, warps: int = 8, slot_kb: int = 16,
                  graph: bool = True, flag: int = 0, pairs: bool = False, nostream: bool = False,
                  marks: bool = True, quiet: bool = False, evict: bool = False, max_stages: int = 32) -> list[dict]:
    """A decode step's GEMVs (GEMV_SHAPES[model] x ``layers``, each op reading the first K of the
    op before's output) two ways, on fresh weights each: one persist_probe launch (one CTA per
    SM, a loader warp streaming every op's rows through a ring of ``slot_kb`` KiB stages, ops
    handed over as PERSIST_HANDOFFS[flag] says: 0, a polled arrival counter; 1, a flag the last
    arriver publishes; 2, the same without the arrival's fence; 3, no counter: the outputs' LL
    words carry the epoch and the next op polls them as its x; ``pairs``: the compute warps take
    an op's chunks two at a time, a row of each a warp in flight; ``nostream``: the loader copies
    nothing, a compute-only control whose outputs are not checked; ``marks`` False: no in-kernel
    marks, the step time alone; ``quiet``: the loader issues nothing from an op's last release
    until its CTA has read the next op's x; ``evict``: the weight copies under an evict-first L2
    policy; ``max_stages``: at most this many ring stages, fewer bytes in flight per SM), and,
    with ``graph``, the decode graph's own launches of the same shapes (norm + qkv, o_proj, norm + gate_up + SiLU, down; PDL
    edges). Per step: µs, µs a layer, the in-kernel marks' split of each op (the caller adds the
    share of the copy bandwidth); the probe's outputs are checked bit for bit against its twin's
    formula on the first layer's ops and the last op."""
    shapes = [(96, 64), (64, 96)] * layers if smoke else GEMV_SHAPES[model] * layers
    G = 2 if smoke else int(dev.properties()["sm_count"])
    kmax = max(K for _, K in shapes)
    slot = max(slot_kb << 10, 16 * -(-2 * kmax // 16))
    xbytes = 16 * -(-2 * kmax // 16)
    smem = int(dev.properties().get("max_shared_per_block_optin", 232448)) - 1024  # the static mbarriers' room
    stages = 2 if smoke else min(32, max_stages, (smem - xbytes) // slot)
    table, wbytes, n_act = persist_ops(shapes, shapes[0][1])
    wsum = sum(N * K * 2 for N, K in shapes)
    plan = ArenaPlan()
    plan.add("w", (wbytes // 2,), "bf16")
    plan.add("act", (n_act,), "bf16")
    plan.add("ops", (table.size,), "u32")
    plan.add("cnt", (2 * len(shapes),), "u32")
    plan.add("step", (1,), "u32")
    plan.add("marks", (8 * len(shapes) * G,), "u64")
    plan.add("ns", (2 * G,), "u64")
    plan.add("ll", (n_act,), "u64")
    arena = dev.arena(plan)
    arena.write("ll", np.zeros(n_act, np.uint64))
    chunk = bf16.from_f32(rng.standard_normal(1 << 22).astype(np.float32) * 0.05)
    w = np.resize(chunk, wbytes // 2)
    arena.write("w", w)
    act = np.zeros(n_act, np.uint16)
    act[:shapes[0][1]] = bf16.from_f32(rng.standard_normal(shapes[0][1]).astype(np.float32))
    arena.write("act", act)
    arena.write("ops", table.reshape(-1))
    arena.write("cnt", np.zeros(2 * len(shapes), np.uint32))
    arena.write("step", np.zeros(1, np.uint32))
    prog = Program(f"persist.{model}.x{layers}")
    prog.launch("handoff_probe", (1,), (32,), [Null(), Null(), 0, Null(), Null(), Null(), Ref("step"), 1, Null()])
    prog.launch("persist_probe", (G,), (32 * (warps + 1),), [Ref("w"), Ref("act"), Ref("ops"), len(shapes), Ref("cnt"),
                                                             Ref("step"), Ref("marks") if marks else Null(), Ref("ns"), slot, kmax,
                                                             flag | 4 * pairs | 16 * nostream | 32 * quiet | 64 * evict,
                                                             Ref("ll") if flag == 3 else Null()],
                shared=xbytes + stages * slot)
    r = time_program(dev, prog, arena, 1, smoke, free=False)
    got = arena.read("act")  # bf16 bits
    for j in [] if nostream else list(range(min(4, len(shapes)))) + [len(shapes) - 1]:
        N, K, w16, i, o = (int(v) for v in table[j])
        W = bf16.to_f32(w[8 * w16: 8 * w16 + N * K]).reshape(N, K)
        if not np.array_equal(persist_gemv(W, bf16.to_f32(got[i:i + K])), got[o:o + N]):
            raise RuntimeError(f"persist_probe ({model}): op {j}'s output differs from its formula")
    out = []
    label = (f"{model} x{layers} {warps}+1w {slot >> 10}K x{stages} {PERSIST_HANDOFFS[flag]}{' pairs' * pairs}"
             f"{' nostream' * nostream}{' nomarks' * (not marks)}{' quiet' * quiet}{' evict' * evict}")
    if not smoke and marks:
        ns = arena.read("ns").astype(np.int64).reshape(G, 2)
        marks = arena.read("marks").astype(np.int64).reshape(len(shapes), 8, G)
        # [op][cta]: past the handover, first chunk seen, arrived after the op, first chunk issued,
        # every compute warp done (before the arrival's fence), thread 0's wait for the chunks (ns)
        passed, ready, issued, done, waited, row_ns, row_clk, marks = (marks[:, 0], marks[:, 1], marks[:, 3], marks[:, 4],
                                                                       marks[:, 5], marks[:, 6], marks[:, 7], marks[:, 2])
        rows = np.array([[(b + 1) * N // G > b * N // G for b in range(G)] for N, _ in shapes])
        late = np.where(rows, ready - passed, 0)  # > 0: the op's first chunk landed after the handover
        ahead = np.where(rows, passed - issued, 0)  # how long before the handover the loader issued it
        # the handover: op j's first CTA past it after op j - 1's last arrival; the work: a CTA's
        # arrival after its own pass (medians over ops and CTAs)
        handover = passed[1:].min(axis=1) - marks[:-1].max(axis=1)
        work = marks - passed
        span = int(ns[:, 1].max() - ns[:, 0].min())
        per = len(GEMV_SHAPES[model])
        ends = marks[per - 1::per].max(axis=1)  # each layer's last arrival
        layer_ns = np.diff(ends)
        last = marks.max(axis=1)  # each op's last arrival; an op's time: from the op before's
        op_us = ([float(np.median(np.diff(last)[(p - 1) % per::per])) / 1e3 for p in range(per)]
                 if layers > 1 else [])

        def per_op(v, with_rows=True):  # µs medians of v [op][cta] for each of a layer's ops
            return [float(np.median(v[p::per][rows[p::per]] if with_rows else v[p::per])) / 1e3 for p in range(per)]

        out.append({"kernel": "persist", "shape": label, "bytes": wsum, **r, "span_us": span / 1e3,
                    "layer_us_median": float(np.median(layer_ns)) / 1e3 if len(layer_ns) else float("nan"),
                    "op_us_median": op_us,
                    "handover_ns_median": float(np.median(handover)) if len(handover) else 0.0,
                    "spread_ns_median": (float(np.median(passed[1:].max(axis=1) - passed[1:].min(axis=1)))
                                         if len(handover) else 0.0),
                    "work_us_median": per_op(work, False),
                    "late_us_median": per_op(late),
                    "ahead_us_median": per_op(ahead),
                    "rows_us_median": per_op(done - ready),
                    "row_us_median": per_op(row_ns),  # thread 0's first row
                    "sm_ghz_median": float(np.median(row_clk[rows] / np.maximum(row_ns[rows], 1))),
                    # of the rows, thread 0's wait for chunks after the first (its first wait is in late_us)
                    "stream_wait_us_median": per_op(waited),
                    "arrive_us_median": per_op(marks - done, False)})
    else:
        out.append({"kernel": "persist", "shape": label, "bytes": wsum, **r})
    if not smoke:
        dev.free(arena.base)
    if not graph:
        return out
    # the decode graph's launches of the same shapes, each layer's weights their own
    arena = gemv_operands(dev, shapes, rng)
    prog = Program(f"persist.graph.{model}.x{layers}")
    kinds = [ks[0] for ks in GEMV_KINDS] if not smoke else ["plain", "plain"]
    for j, (N, K) in enumerate(shapes):
        add_gemv(prog, kinds[j % len(kinds)], Ref(f"w{j}"), N, K, None)
    r = time_program(dev, prog, arena, 1, smoke)
    out.append({"kernel": "persist_graph", "shape": f"{model} x{layers} launches", "bytes": wsum, **r})
    return out


HOL_TABLE = 1 << 14  # chase entries (64 KiB): stays in L2 between the probe's launches


def bench_hol(dev, inflight: int, mode: int, smoke: bool, rng, hops: int = 8, threads: int = 256) -> dict:
    """One CTA per SM issues ``inflight`` bytes of copies from DRAM into its shared memory
    (mode 0: cp.async from every thread, as the GEMV preload; 1: bulk copies by one thread) and,
    without waiting for them, times ``hops`` dependent L2-hit loads: does a CTA's own preload
    delay the loads after its PDL wait (the fused GEMVs' prologues take ~1.9 us for one round
    trip)? Per CTA: ns per hop and until the copies landed (medians and p90 over the SMs)."""
    G = 2 if smoke else int(dev.properties()["sm_count"])
    per_launch = max(16, G * inflight)
    c = 2 if smoke or inflight == 0 else copies_for(per_launch, smoke)
    plan = ArenaPlan()
    plan.add("chase", (HOL_TABLE,), "u32")
    for i in range(c):
        plan.add(f"src{i}", (per_launch // 4,), "u32")
        plan.add(f"ns{i}", (3 * G,), "u64")
        plan.add(f"last{i}", (G,), "u32")
    arena = dev.arena(plan)
    perm = rng.permutation(HOL_TABLE).astype(np.uint32)  # one cycle through every entry
    chase = np.empty(HOL_TABLE, np.uint32)
    chase[perm] = np.roll(perm, -1)
    arena.write("chase", chase)
    label = f"{inflight >> 10} KiB {'cp.async' if mode == 0 else 'bulk'}"
    prog = Program(f"hol.{label}")
    for i in range(c):
        prog.launch("l2_hol_probe", (G,), (threads,), [Ref(f"src{i}"), Ref("chase"), Ref(f"ns{i}"), Ref(f"last{i}"), inflight, hops,
                                                        mode], shared=max(inflight, 16))
    r = time_program(dev, prog, arena, c, smoke, free=False)
    ns = arena.read(f"ns{c - 1}").astype(np.int64).reshape(G, 3)
    if not np.array_equal(arena.read(f"last{c - 1}"), chase_ends(chase, G, hops)):
        raise RuntimeError("l2_hol_probe: the chase chains ended at the wrong index")
    if not smoke:
        dev.free(arena.base)
    hop = ns[:, 1] / hops
    return {"kernel": "hol", "shape": label, "bytes": per_launch, "cta_bytes": inflight, "mode": mode, **r,
            "hop_ns_median": float(np.median(hop)), "hop_ns_p90": float(np.percentile(hop, 90)),
            "issue_us_median": float(np.median(ns[:, 0])) / 1e3, "issue_us_p90": float(np.percentile(ns[:, 0], 90)) / 1e3,
            "landed_us_median": float(np.median(ns[:, 2])) / 1e3}


def bench_bcast(dev, ctas: int, nbytes: int, reps: int, writer: bool, smoke: bool, rng, threads: int = 256) -> dict:
    """``ctas`` CTAs read the same ``nbytes`` row (replica b % ``reps``) right after their PDL wait,
    as every CTA of a decode GEMV reads the residual row its predecessor wrote (``writer``: a
    copy kernel rewrites the rows just before, as in the chain): per CTA, ns from its wait until
    the row is loaded and reduced (medians, p90, max over the CTAs) and the spread of the waits'
    release. Do the CTAs queue at the L2 slices holding the row (the fused GEMVs' ~1.8 us)?"""
    G = 2 if smoke else ctas
    stride = nbytes
    words = reps * stride // 4
    c = 2 if smoke else 4
    plan = ArenaPlan()
    plan.add("vec", (words,), "u32")
    plan.add("src", (words,), "u32")
    for i in range(c):
        plan.add(f"ns{i}", (2 * G,), "u64")
        plan.add(f"sum{i}", (G,), "u32")
    arena = dev.arena(plan)
    data = rng.integers(0, 1 << 32, size=words, dtype=np.uint64).astype(np.uint32)
    arena.write("vec", data)
    arena.write("src", data)
    label = f"{nbytes >> 10} KiB x{G} r{reps}{' w' if writer else ''}"
    prog = Program(f"bcast.{label}")
    for i in range(c):
        if writer:  # the predecessor rewrites the rows (same values): the probe reads fresh lines
            prog.launch("copy_f32", (max(1, min(132, words // 256)),), (256,), [Ref("vec"), Ref("src"), words])
        prog.launch("bcast_probe", (G,), (threads,), [Ref("vec"), Ref(f"ns{i}"), Ref(f"sum{i}"), nbytes, reps, stride])
    r = time_program(dev, prog, arena, c, smoke, free=False)
    from fixedgraph.backends.reference.twins.runtime_test import bcast_sums

    if not np.array_equal(arena.read(f"sum{c - 1}"), bcast_sums(data, G, nbytes, reps, stride)):
        raise RuntimeError("bcast_probe: a CTA read the wrong row")
    ns = arena.read(f"ns{c - 1}").astype(np.int64).reshape(G, 2)
    if not smoke:
        dev.free(arena.base)
    return {"kernel": "bcast", "shape": label, "bytes": G * nbytes, "ctas": G, "row_bytes": nbytes, "reps": reps,
            "writer": writer, **r, "read_ns_median": float(np.median(ns[:, 1])),
            "read_ns_p90": float(np.percentile(ns[:, 1], 90)), "read_ns_max": float(ns[:, 1].max()),
            "release_spread_ns": float(ns[:, 0].max() - ns[:, 0].min())}


ICACHE_PROBES = ("icache_probe_2k", "icache_probe_8k", "icache_probe_32k")  # 2, 8, 32 KB of FMAs after the wait


def bench_icache(dev, entry: str, ctas: int, threads: int, smoke: bool, rng, a: float = 0.999,
                 b: float = 0.001, flush_blocks: int = 10) -> dict:
    """``ctas`` CTAs of ``threads`` run ``entry``'s straight line of FMAs (16 bytes of SASS each:
    2, 8 or 32 KB) right after their PDL wait, its code warm (the same probe ran just before, on
    one CTA per SM so that every SM holds it) or cold in the SM's instruction caches (icache_flush,
    one CTA of 256 per SM, ran ~267 KB of code just before; the code stays in L2 either way), as a
    decode kernel's code after its wait is cold when the layer's ~120 KB cycled through the SM.
    Per CTA, ns from its wait until its last warp's FMAs are done (medians, p90 over the CTAs of
    the copies), and (cold - warm) per KB of FMA code: what a KB of cold code costs a kernel.
    ``flush_blocks`` < 10: the flush runs only that many of its 10 blocks of 1024 FMAs (ptxas 13.0
    sm_90: ~16 KB of SASS for the last block, ~28 KB for each other: it reloads a and b from the
    constant bank), so the sweep over it says how much other code an SM runs before a kernel's
    code is cold again (the caches' reach)."""
    G = 2 if smoke else ctas
    sms = 2 if smoke else int(dev.properties()["sm_count"])
    fmas = ICACHE_FMAS[entry]
    kb = fmas * 16 / 1024
    c = 2 if smoke else 4
    plan = ArenaPlan()
    plan.add("out", (max(G, sms) * threads,), "f32")
    plan.add("flush_out", (sms * 256,), "f32")
    plan.add("ns_first", (2 * max(G, sms),), "u64")
    for i in range(c):
        plan.add(f"ns{i}", (2 * G,), "u64")
    arena = dev.arena(plan)
    label = f"{kb:.0f} KB x{G} t{threads}" + (f" flush{flush_blocks}" if flush_blocks != 10 else "")
    want = np.tile(icache_sums(threads, fmas, a, b), G)
    res = {}
    for mode in ("warm", "cold"):
        prog = Program(f"icache.{label}.{mode}")
        for i in range(c):
            if mode == "warm":  # the same code just ran on every SM
                prog.launch(entry, (max(G, sms),), (threads,), [Ref("ns_first"), Ref("out"), a, b])
            else:  # ~267 KB of other code just ran on every SM
                prog.launch("icache_flush", (sms,), (256,), [Ref("flush_out"), a, b, flush_blocks])
            prog.launch(entry, (G,), (threads,), [Ref(f"ns{i}"), Ref("out"), a, b])
        res[mode] = time_program(dev, prog, arena, 2 * c, smoke, free=False)
        if not np.array_equal(arena.read("out")[:G * threads], want):
            raise RuntimeError(f"{entry}: a thread's FMA chains summed to the wrong value")
        ns = np.concatenate([arena.read(f"ns{i}").astype(np.int64).reshape(G, 2)[:, 1] for i in range(c)])
        res[mode].update({f"{mode}_ns_median": float(np.median(ns)), f"{mode}_ns_p90": float(np.percentile(ns, 90))})
    if not smoke:
        dev.free(arena.base)
    return {"kernel": "icache", "shape": label, "bytes": G * threads * 4, "ctas": G, "threads": threads,
            "entry": entry, "code_kb": kb, "flush_blocks": flush_blocks, "us": res["warm"]["us"], "cold_us": res["cold"]["us"],
            **{k: v for r in res.values() for k, v in r.items() if k != "us"},
            "cold_minus_warm_ns_per_kb_median": (res["cold"]["cold_ns_median"] - res["warm"]["warm_ns_median"]) / kb,
            "cold_minus_warm_ns_per_kb_p90": (res["cold"]["cold_ns_p90"] - res["warm"]["warm_ns_p90"]) / kb}


def bench_handoff(dev, ctas: int, mode: str, smoke: bool, rng, threads: int = 256, chain: int = 16,
                  cluster: int = 1, alternate: bool = False, smem: tuple[int, int] = (0, 0)) -> dict:
    """A chain of ``chain`` handoff_probe grids of ``ctas`` CTAs (after one that bumps the epoch),
    each CTA reading elements the grid before wrote, handed over by PDL waits (``mode`` "pdl") or
    by flags (the first grid waits, then each publishes a flag its successor's CTAs poll). Per
    launch: µs in the graph, and the handoff (a grid's first CTA past its handoff after the
    previous grid's last CTA finished its stores; medians and p90 over the chain). ``cluster`` >
    1: the grids launch as thread-block clusters of that many CTAs (every grid, or with
    ``alternate`` every second one, as a clustered launch after a plain one would run): what
    a cluster costs a PDL handoff, the question before a clustered qkv + attention launch.
    ``smem``: dynamic shared memory (bytes, unused) of the plain and the clustered grids, so the
    grids hold the footprints of the launches they stand for (e.g. 74 KB for norm + qkv, 134 KB
    for the clustered kernel); with ``alternate`` a clustered grid then cannot share an SM with
    its plain predecessor's CTAs, as the real one could not."""
    G = 2 if smoke else ctas
    c = 3 if smoke else chain
    n = G * threads
    plan = ArenaPlan()
    for name in ("a", "b"):
        plan.add(name, (n,), "f32")
    plan.add("cnt", (1,), "u32")
    plan.add("step", (1,), "u32")
    for j in range(c):
        plan.add(f"flag{j}", (1,), "u32")
        plan.add(f"ns{j}", (3 * G,), "u64")
    arena = dev.arena(plan)
    x = rng.standard_normal(n).astype(np.float32)
    arena.write("a", x)
    for name in ("cnt", "step", *(f"flag{j}" for j in range(c))):
        arena.write(name, np.zeros(1, np.uint32))
    label = (f"{mode} x{G}" + (f" c{cluster}" + ("alt" if alternate else "") if cluster > 1 else "")
             + (f" {smem[0] >> 10}/{smem[1] >> 10}K" if any(smem) else ""))
    prog = Program(f"handoff.{label}")
    prog.launch("handoff_probe", (1,), (32,), [Ref("a"), Ref("b"), n, Ref("cnt"), Null(), Null(), Ref("step"), 1,
                                              Ref("ns0")])
    bufs = ("a", "b")
    for j in range(c):
        flag_in = Ref(f"flag{j - 1}") if mode == "flag" and j > 0 else Null()
        flag_out = Ref(f"flag{j}") if mode == "flag" else Null()
        second = not alternate or j % 2 == 1  # the position a clustered grid takes
        clustered = cluster > 1 and second
        prog.launch("handoff_probe", (G,), (threads,), [Ref(bufs[j % 2]), Ref(bufs[(j + 1) % 2]), n, Ref("cnt"),
                                                         flag_in, flag_out, Ref("step"), 0, Ref(f"ns{j}")],
                    cluster=(cluster, 1, 1) if clustered else None, shared=smem[1] if second else smem[0])
    r = time_program(dev, prog, arena, c + 1, smoke, free=False)
    replays = 1 if smoke else 22  # time_program's warmup and timed launches, each one pass of the chain
    got = arena.read(bufs[c % 2])
    if not np.array_equal(got, handoff_chain(x, replays * c)):
        raise RuntimeError(f"handoff_probe ({mode}): a grid read data its predecessor had not yet written")
    ns = np.stack([arena.read(f"ns{j}").astype(np.int64).reshape(G, 3) for j in range(c)])  # [launch][cta][3]
    gaps = ns[1:, :, 1].min(axis=1) - ns[:-1, :, 2].max(axis=1)
    early = ns[:-1, :, 2].max(axis=1) - ns[1:, :, 0].min(axis=1)
    if not smoke:
        dev.free(arena.base)
    return {"kernel": "handoff", "shape": label, "bytes": 2 * n * 4, "ctas": G, "mode": mode, "cluster": cluster,
            "alternate": alternate, **r,
            "handoff_ns_median": float(np.median(gaps)), "handoff_ns_p90": float(np.percentile(gaps, 90)),
            "early_ns_median": float(np.median(early))}


def time_program(dev, prog, arena, launches: int, smoke: bool, free: bool = True) -> dict:
    graph = dev.graph(dev.bind(prog, arena))
    if smoke:
        graph.launch()
        return {"us": float("nan")}
    from fixedgraph.profile import gpu_ms

    us = gpu_ms(dev, graph.launch, 20, warmup=2) * 1e3 / launches
    del graph
    if free:
        dev.free(arena.base)
    return {"us": us}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json")
    ap.add_argument("--smoke", action="store_true", help="tiny shapes on the reference backend")
    ap.add_argument("--only", nargs="+", choices=("gemv", "attention", "staging", "hol", "bcast", "icache", "handoff",
                                                     "persist", "chain"),
                    help="time only these kernels (one or more groups)")
    ap.add_argument("--staging-kb", type=int, nargs="+", default=[48, 96, 190],
                    help="staging probe: KiB per CTA (one CTA per SM)")
    ap.add_argument("--staging-variant", help="staging probe: only the methods whose label starts with this "
                    "(e.g. 'cp.async', 'ld.v4', under ncu)")
    ap.add_argument("--handoff-cluster", type=int, nargs="+", default=[],
                    help="handoff probe: also 128-CTA chains launched as clusters of these sizes (e.g. 8 16)")
    ap.add_argument("--handoff-smem", type=int, nargs=2, default=(0, 0), metavar=("PLAIN_KB", "CLUSTER_KB"),
                    help="handoff probe with --handoff-cluster: also the alternating chain with these dynamic "
                    "shared-memory footprints (e.g. 74 134), and a plain one holding the same")
    ap.add_argument("--persist-model", nargs="+", default=["qwen3-0.6b"], choices=tuple(GEMV_SHAPES),
                    help="persist probe: the GEMV shapes of these models")
    ap.add_argument("--persist-layers", type=int, default=28, help="persist probe: layers a step")
    ap.add_argument("--persist-warps", type=int, nargs="+", default=[8], help="persist probe: compute warps a CTA")
    ap.add_argument("--persist-slot-kb", type=int, nargs="+", default=[16], help="persist probe: KiB a ring stage")
    ap.add_argument("--persist-stages", type=int, nargs="+", default=[32],
                    help="persist probe: at most this many ring stages (default: as many as shared memory holds)")
    ap.add_argument("--persist-pairs", type=int, nargs="+", default=[0], choices=(0, 1),
                    help="persist probe: 1 has each compute warp take a row of two chunks at once")
    ap.add_argument("--persist-control", nargs="+", default=["none"],
                    choices=("none", "nostream", "nomarks", "quiet", "evict", "quiet+evict"),
                    help="persist probe: also run with the loader copying nothing (compute only, outputs "
                    "unchecked), without the in-kernel marks, with quiet handovers (no copy issued from an op's "
                    "last release until the next op's x is read), with the weights under an evict-first L2 "
                    "policy, or both")
    ap.add_argument("--persist-handoff", nargs="+", default=["count"], choices=PERSIST_HANDOFFS,
                    help="persist probe: ops handed over by a polled counter, a published flag, a flag "
                    "whose arrival has no fence before it, or LL words (value and epoch in one 8-byte store)")
    ap.add_argument("--hol-kb", type=int, nargs="+", default=[0, 16, 32, 64, 96, 128, 192],
                    help="hol probe: KiB of copies in flight per CTA (one CTA per SM)")
    ap.add_argument("--gemv-model", choices=tuple(GEMV_SHAPES), help="GEMV shapes of this model only")
    ap.add_argument("--gemv-shape", help="only this GEMV weight shape, NxK (e.g. 1024x2048, under ncu)")
    ap.add_argument("--gemv-defer", type=int, nargs="+", choices=(0, 1, 2),
                    help="the norm GEMVs under each FIXEDGRAPH_NORM_DEFER form (0 _row, 1 _dn, 2 _dw where it fits)")
    ap.add_argument("--ctx", type=int, nargs="+", default=[4096, 8192, 16384, 32768],
                    help="attention contexts (e.g. one, under ncu)")
    ap.add_argument("--attn-hq", type=int, default=32,
                    help="attention query heads over 8 kv heads (32: 8B-class GQA 4; 16: Qwen3-0.6B's GQA 2)")
    ap.add_argument("--attn-d", type=int, default=128, choices=attention.DECODE_HEAD_DIMS,
                    help="attention head dim (128: Qwen3 / Llama-3-8B; 64: Llama-3.2-1B; 96: the d96 entries)")
    ap.add_argument("--attn-swap", action="store_true",
                    help="also time the heads-on-N (_sw) attention entry, from DRAM and from L2")
    ap.add_argument("--chain-model", nargs="+", default=["qwen3-0.6b"],
                    help="chain probe (--only chain): the decode steps of these models (checkpoints.CONFIGS names)")
    ap.add_argument("--chain-ctx", type=int, nargs="+", default=[128], help="chain probe: keys a step reads")
    ap.add_argument("--chain-ctas-per-sm", type=int, nargs="+", default=[READ_CTAS_PER_SM[0]],
                    help=f"chain probe: grids of these many {READ_THREADS}-thread CTAs an SM (e.g. 1 2 4: what a "
                    "launch's grid completion costs against fewer, fuller CTAs)")
    ap.add_argument("--chain-variant", nargs="+", default=list(CHAIN_VARIANTS), choices=CHAIN_VARIANTS,
                    help="chain probe: the launch kinds (late, early: reads only; hand, handnorm: early plus the "
                    "vector handed over after the wait, without and with a CTA-wide reduction over it)")
    ap.add_argument("--no-read", action="store_true",
                    help="skip the read floor (read_probe at each GEMV / attention size timed)")
    ap.add_argument("--attn-steal", action="store_true",
                    help="also time the tile-sharing (_st) attention entry (from DRAM)")
    args = ap.parse_args()
    only = set(args.only or ())  # empty: every group of the default run (gemv, attention)
    rng = np.random.default_rng(0)
    dev = get_device("reference" if args.smoke else "cuda")
    rows = []
    if args.smoke:
        rows += bench_gemv(dev, 64, 96, "plain", True, rng, (None, 2))
        rows += bench_gemv(dev, 64, 96, "rmsnorm", True, rng, defers=(0, 1, 2))
        rows += bench_gemv(dev, 64, 96, "rmsnorm_silu", True, rng, defers=(0, 2))
        rows += bench_gemv(dev, 64, 96, "silu", True, rng)
        rows.append(bench_attention(dev, 100, True, rng, Hq=4, Hkv=2, D=64))
        rows.append(bench_attention(dev, 100, True, rng, Hq=4, Hkv=1, D=64, rows=3))
        rows.append(bench_attention(dev, 100, True, rng, Hq=4, Hkv=2, D=64, l2_resident=True))
        rows.append(bench_attention(dev, 100, True, rng, Hq=4, Hkv=2, D=128, swap=True))
        rows.append(bench_attention(dev, 100, True, rng, Hq=4, Hkv=2, D=128, steal=True))
        rows += bench_read(dev, 100 * 2 * 64 * 2 * 2, True, rng)
        rows += [bench_chain(dev, "tiny-qwen3", 64, v, True, rng) for v in CHAIN_VARIANTS]
        rows += bench_staging(dev, 4096, True, rng)
        rows += [bench_hol(dev, 4096, m, True, rng) for m in (0, 1)]
        rows.append(bench_bcast(dev, 2, 4096, 2, True, True, rng))
        rows += [bench_icache(dev, e, 2, 32, True, rng) for e in ICACHE_PROBES]
        rows.append(bench_icache(dev, "icache_probe_8k", 2, 32, True, rng, flush_blocks=2))
        rows += [bench_handoff(dev, 2, m, True, rng) for m in ("pdl", "flag")]
        rows += bench_persist(dev, "qwen3-0.6b", 2, True, rng)
        rows += bench_persist(dev, "qwen3-0.6b", 2, True, rng, graph=False, flag=PERSIST_HANDOFFS.index("ll"), pairs=True,
                              quiet=True, evict=True)
        rows.append(bench_handoff(dev, 2, "pdl", True, rng, cluster=2, alternate=True, smem=(1024, 2048)))
        print(f"smoke ok: {len(rows)} programs ran on the reference backend")
        return 0
    import torch  # the copy-bandwidth ceiling, measured the same way as tools/bench.py

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import peers

    copy = peers.copy_bandwidth_GBps()
    del torch
    if "hol" in only:
        rows += [bench_hol(dev, kb * 1024, m, False, rng) for m in (0, 1) for kb in args.hol_kb if kb or m == 0]
    if "bcast" in only:
        for nbytes in (4096, 16384):
            for ctas in (1, 64, 132, 264, 396):
                for reps in ((1, 16) if ctas > 1 else (1,)):
                    rows.append(bench_bcast(dev, ctas, nbytes, reps, True, False, rng))
            rows.append(bench_bcast(dev, 396, nbytes, 1, False, False, rng))
    if "handoff" in only:
        for ctas in (64, 132, 264, 396):
            for mode in ("pdl", "flag"):
                rows.append(bench_handoff(dev, ctas, mode, False, rng))
        smem = tuple(kb << 10 for kb in args.handoff_smem)
        for c in args.handoff_cluster:  # 128 CTAs (every cluster size up to 16 divides it), PDL
            rows.append(bench_handoff(dev, 128, "pdl", False, rng))
            for alternate in (False, True):
                rows.append(bench_handoff(dev, 128, "pdl", False, rng, cluster=c, alternate=alternate))
            if any(smem):  # the same with the launches' footprints, against plain grids holding them
                rows.append(bench_handoff(dev, 128, "pdl", False, rng, cluster=c, alternate=True, smem=smem))
                rows.append(bench_handoff(dev, 128, "pdl", False, rng, cluster=1, alternate=True, smem=smem))
    if "icache" in only:
        for entry in ICACHE_PROBES:
            for threads in (32, 256):
                for ctas in (int(dev.properties()["sm_count"]), 1):
                    rows.append(bench_icache(dev, entry, ctas, threads, False, rng))
        for blocks in (1, 2, 3, 4, 5, 6, 8):  # the caches' reach: 16-210 KB of other code in between
            rows.append(bench_icache(dev, "icache_probe_8k", int(dev.properties()["sm_count"]), 256, False, rng,
                                     flush_blocks=blocks))
    if "persist" in only:
        for model in args.persist_model:
            combos = [(w, k, h, x, c, st) for w in args.persist_warps for k in args.persist_slot_kb
                      for h in args.persist_handoff for x in args.persist_pairs for c in args.persist_control
                      for st in args.persist_stages]
            for n, (warps, kb, h, x, c, st) in enumerate(combos):
                rows += bench_persist(dev, model, args.persist_layers, False, rng, warps, kb, graph=n == 0,
                                      flag=PERSIST_HANDOFFS.index(h), pairs=bool(x), nostream=c == "nostream",
                                      marks=c != "nomarks", quiet="quiet" in c, evict="evict" in c,
                                      max_stages=st)
    if "chain" in only:
        for model in args.chain_model:
            for ctx in args.chain_ctx:
                for variant in args.chain_variant:
                    for per_sm in args.chain_ctas_per_sm:
                        rows.append(bench_chain(dev, model, ctx, variant, False, rng, ctas_per_sm=per_sm))
    if "staging" in only:
        for kb in args.staging_kb:
            rows += bench_staging(dev, kb * 1024, False, rng, variants=args.staging_variant)
    for model, shapes in (GEMV_SHAPES.items() if not only or "gemv" in only else ()):
        if args.gemv_model and model != args.gemv_model:
            continue
        for (N, K), ks in zip(shapes, GEMV_KINDS):  # what the decode step launches
            if args.gemv_shape and args.gemv_shape != f"{N}x{K}":
                continue
            for kind in ks:
                for r in bench_gemv(dev, N, K, kind, False, rng, split_candidates(N, K, kind),
                                    tuple(args.gemv_defer) if args.gemv_defer else (None,)):
                    r["model"] = model
                    rows.append(r)
    heads = dict(Hq=args.attn_hq, D=args.attn_d)  # the GQA group and head dim every attention row times
    for ctx in (args.ctx if not only or "attention" in only else ()):
        rows.append(bench_attention(dev, ctx, False, rng, **heads))
        # layout probe: same bytes and CTAs, each CTA's K/V of a block one contiguous run
        rows.append(bench_attention(dev, ctx, False, rng, Hq=4, Hkv=1, rows=8, D=args.attn_d))
        # block-table probe: the blocks in pool order instead of shuffled
        rows.append(bench_attention(dev, ctx, False, rng, **heads, shuffle=False))
        # L2 probe: the same launches over one copy of the K/V, in L2 while it fits (up to ~8k keys)
        rows.append(bench_attention(dev, ctx, False, rng, **heads, l2_resident=True))
        if args.attn_swap:
            rows.append(bench_attention(dev, ctx, False, rng, **heads, swap=True))
            rows.append(bench_attention(dev, ctx, False, rng, **heads, swap=True, l2_resident=True))
        if args.attn_steal:
            rows.append(bench_attention(dev, ctx, False, rng, **heads, steal=True))
    # the read floor of each size timed above (GEMV weights, an attention context's K/V)
    if not args.no_read:
        sizes = sorted({r["bytes"] for r in rows if r["kernel"].startswith(("gemv", "attention", "attn"))})
        for nbytes in sizes:
            rows += bench_read(dev, nbytes, False, rng)
    print(f"copy bandwidth {copy:.0f} GB/s")
    for r in rows:
        r["GBps"] = r["bytes"] / (r["us"] * 1e3)
        r["fraction"] = r["GBps"] / copy
    floor = {}  # bytes -> the best read_probe time of that size
    for r in rows:
        if r["kernel"] == "read":
            floor[r["bytes"]] = min(floor.get(r["bytes"], float("inf")), r["us"])
    for r in rows:  # read_probe rounds its size down to whole 16-byte words
        f = floor.get(r["bytes"] // 16 * 16)
        if f is not None:
            r["of_read"] = f / r["us"]
    # One line per (kernel, shape): the launcher's default split and the best one measured.
    print(f"{'kernel':<20} {'shape':<16} {'MB':>7} {'S':>3} {'us':>8} {'of copy':>8}  {'best S':>6} {'us':>8} {'of copy':>8}"
          f" {'of read':>8}")
    seen = {}
    for r in rows:
        seen.setdefault((r["kernel"], r["shape"]), []).append(r)
    for (kernel, shape), rs in seen.items():
        d = next((r for r in rs if r.get("default", True)), rs[0])
        b = min(rs, key=lambda r: r["us"])
        print(f"{kernel:<20} {shape:<16} {d['bytes'] / 1e6:>7.1f} {d.get('split', '-')!s:>3} {d['us']:>8.2f} "
              f"{d['fraction'] * 100:>7.0f}%  {b.get('split', '-')!s:>6} {b['us']:>8.2f} {b['fraction'] * 100:>7.0f}%"
              + (f" {d['of_read'] * 100:>7.0f}%" if "of_read" in d else ""))
    for r in (r for r in rows if r["kernel"] == "chain"):
        floor_us = r["bytes"] / (copy * 1e3)
        print(f"chain {r['shape']:<40} {r['us']:8.1f} us a step ({r['launches']} launches, {r['bytes'] / 1e6:7.1f} MB: "
              f"{r['fraction'] * 100:3.0f}% of copy; the bytes' floor {floor_us:6.1f} us; "
              f"{(r['us'] - floor_us) / r['launches']:5.2f} us a launch over it)")
    for r in (r for r in rows if r["kernel"] == "staging"):
        print(f"staging {r['cta_bytes'] >> 10:>4} KiB/CTA {r['shape']:<20} span {r['span_us']:7.2f} us "
              f"{r['span_GBps']:7.0f} GB/s ({r['span_GBps'] / copy * 100:3.0f}% of copy), median CTA "
              f"{r['cta_median_us']:6.2f} us = {r['per_sm_GBps']:5.1f} GB/s per SM")
    for r in (r for r in rows if r["kernel"].startswith("persist")):
        extra = (f"; in-kernel span {r['span_us']:8.1f} us, a layer's last arrival to the next's: median "
                 f"{r['layer_us_median']:6.2f} us (ops: {' '.join(f'{u:.2f}' for u in r['op_us_median'])}; a CTA's work "
                 f"after its handover: {' '.join(f'{u:.2f}' for u in r['work_us_median'])}); handover median "
                 f"{r['handover_ns_median']:.0f} ns, passes spread over {r['spread_ns_median']:.0f} ns; first chunk "
                 f"issued {' '.join(f'{u:.2f}' for u in r['ahead_us_median'])} us before the handover, landed "
                 f"{' '.join(f'{u:.2f}' for u in r['late_us_median'])} us after it; first chunk to done "
                 f"{' '.join(f'{u:.2f}' for u in r['rows_us_median'])} us (waiting for the later chunks "
                 f"{' '.join(f'{u:.2f}' for u in r['stream_wait_us_median'])}; thread 0's first row "
                 f"{' '.join(f'{u:.2f}' for u in r['row_us_median'])} us at {r['sm_ghz_median']:.2f} GHz), the arrival (fence + add) "
                 f"{' '.join(f'{u:.2f}' for u in r['arrive_us_median'])} us"
                 if "span_us" in r else "")
        print(f"{r['kernel']:<13} {r['shape']:<34} {r['us']:8.1f} us a step ({r['fraction'] * 100:3.0f}% of copy){extra}")
    for r in (r for r in rows if r["kernel"] == "hol"):
        print(f"hol {r['shape']:<18} issue {r['issue_us_median']:5.2f} us (p90 {r['issue_us_p90']:5.2f}); L2 hop median "
              f"{r['hop_ns_median']:7.0f} ns p90 {r['hop_ns_p90']:7.0f} ns; copies landed {r['landed_us_median']:6.2f} us after the chain's start")
    for r in (r for r in rows if r["kernel"] == "bcast"):
        print(f"bcast {r['shape']:<22} read after the wait: median {r['read_ns_median']:6.0f} ns p90 "
              f"{r['read_ns_p90']:6.0f} max {r['read_ns_max']:6.0f}; waits released over {r['release_spread_ns']:6.0f} ns")
    for r in (r for r in rows if r["kernel"] == "handoff"):
        print(f"handoff {r['shape']:<16} {r['us']:6.2f} us a launch; handoff (previous grid's last store -> first CTA "
              f"past its handoff) median {r['handoff_ns_median']:6.0f} ns p90 {r['handoff_ns_p90']:6.0f}; resident "
              f"{r['early_ns_median']:6.0f} ns before that store")
    for r in (r for r in rows if r["kernel"] == "icache"):
        print(f"icache {r['shape']:<18} after the wait: warm median {r['warm_ns_median']:6.0f} ns p90 "
              f"{r['warm_ns_p90']:6.0f}; cold median {r['cold_ns_median']:6.0f} p90 {r['cold_ns_p90']:6.0f}; cold - warm per KB: median "
              f"{r['cold_minus_warm_ns_per_kb_median']:6.1f} ns p90 {r['cold_minus_warm_ns_per_kb_p90']:6.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_GBps": copy, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

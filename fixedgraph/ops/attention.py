"""Launchers of ptx/src/attention.cu: paged attention for decode (split-K; optionally with QK-norm,
RoPE and the KV write folded in) and causal prefill.

KV pools: [num_blocks, block_size, Hkv, D] bf16, one K and one V pool per layer; token t of a
sequence lives in block ``block_table[t // block_size]`` at offset ``t % block_size``. Query head
h reads kv head ``h // (Hq // Hkv)``. Decode with ``num_splits > 1`` needs the scratch regions
named by ``decode_scratch``; the same scratch serves every layer (launches run in order).

NOTE: the counters (``SCRATCH_COUNT``: per (row, kv head) one u32 of split arrivals and one of
tiles taken, the latter used by the tile-sharing ``_st`` entries) must be zeroed once when the
arena is created (see ``ZERO_AT_BOOT``); every decode launch leaves them at 0 again, so graph
replays need nothing further. The reference twin refuses to run on non-zero counters.
"""
from __future__ import annotations

import os

from fixedgraph.program import Arg, Null, Program

DECODE_HEAD_DIMS = (64, 96, 128, 256)
DECODE_ROPE_HEAD_DIMS = (64, 96, 128)  # the fused QK-norm + RoPE + KV-write entries
PREFILL_HEAD_DIMS = (64, 96, 128)
DECODE_THREADS = 128  # fixed by the kernel (4 warps)
PREFILL_THREADS = 256  # fixed by the kernel (8 warps x 16 query rows)
PREFILL_ROWS_PER_CTA = 128  # (token, query head) rows per CTA
DECODE_TILE_KEYS = 64  # keys per K/V tile of the tensor-core decode body (D <= 128)
DECODE_STAGES = 2  # K/V tiles in flight per CTA
MAX_SPLITS = 32
ONE_PER_SM_MIB = 24  # one CTA per SM up to this many MiB of K/V a launch on 132 SMs (choose_num_splits)
ONE_PER_SM_REF_SMS = 132  # the SM count ONE_PER_SM_MIB was measured on (H200); it scales with SMs
MIN_KEYS_PER_SPLIT = 64  # one tile: at short contexts fewer splits beat more CTAs (A/B: 32, 64, 128, 256 keys)
SCRATCH_O = "attn_split_o"  # [rows, Hq, num_splits, D] f32: per-split normalised outputs
SCRATCH_ML = "attn_split_ml"  # [rows, Hq, num_splits, 2] f32: per-split (max score ln, sum exp)
SCRATCH_COUNT = "attn_split_count"  # [2 rows, Hkv] u32: split arrivals, then tiles taken; 0 at rest
ZERO_AT_BOOT = (SCRATCH_COUNT,)  # scratch regions the arena must hold zeroed before the first launch


def _check_heads(op: str, Hq: int, Hkv: int, D: int, dims: tuple[int, ...]) -> None:
    if Hq < 1 or Hkv < 1 or Hq % Hkv:
        raise ValueError(f"{op}: Hq={Hq} must be a positive multiple of Hkv={Hkv}")
    if D not in dims:
        raise ValueError(f"{op}: head_dim {D} is not supported; supported head dims: "
                         f"{', '.join(map(str, dims))} (add an entry in ptx/src/attention.cu)")


def decode_scratch(rows: int, Hq: int, D: int, num_splits: int,
                   Hkv: int | None = None) -> dict[str, tuple[tuple[int, ...], str]]:
    """Scratch regions ``attention_decode`` needs: ``name -> (shape, dtype)``; empty when S == 1.

    ``SCRATCH_COUNT`` ([2 rows, Hkv] u32: the arrival counters, then the ``_st`` entries' tile
    counters; sized [2 rows, Hq] when ``Hkv`` is not given, which covers any Hkv) must be zeroed
    at boot: see ``ZERO_AT_BOOT``.
    """
    if num_splits <= 1:
        return {}
    return {SCRATCH_O: ((rows, Hq, num_splits, D), "f32"),
            SCRATCH_ML: ((rows, Hq, num_splits, 2), "f32"),
            SCRATCH_COUNT: ((2 * rows, Hkv if Hkv else Hq), "u32")}


def boot_zero_regions(region_names) -> list[str]:
    """The arena regions (planned from ``decode_scratch`` under any prefix) to zero once at boot."""
    return [n for n in region_names if n.rsplit(".", 1)[-1] in ZERO_AT_BOOT]


def decode_shared_bytes(D: int) -> int:
    """Dynamic shared memory of ``paged_attention_decode_d{D}``: K/V tile stages (0 for D = 256)."""
    return 0 if D > 128 else DECODE_STAGES * 2 * DECODE_TILE_KEYS * (D + 8) * 2


def choose_num_splits(max_seq_len: int, rows: int, Hkv: int, num_sms: int = 132, D: int = 128) -> int:
    """Splits per (row, kv head) for a graph whose longest context is ``max_seq_len`` keys.

    Fixed when the graph is built; each launch cuts a row of n keys into pieces of
    round_up(ceil(n / S), block_size) keys, so short contexts use fewer, shorter splits and the
    rest exit after one load (no scratch, no counter). Never more than ``max_seq_len //
    min_keys_per_split()`` splits. CTAs: one per SM while the launch's K/V (bf16, at the longest
    context) is at most ``one_per_sm_bytes()`` (per ONE_PER_SM_REF_SMS SMs: the limit is what
    each SM streams, so it scales with ``num_sms``), two per SM (the kernel's occupancy) past it: a
    second CTA's tiles in flight pay only once streaming the keys dominates the launch. Below
    that, the CTAs a second wave adds cost more beside the GEMVs before and after the attention
    than they stream (session 31, Qwen3-0.6B, FIXEDGRAPH_ATTN_MAX_SPLITS=16 against 32: 2112-key
    bucket -11.7% a token, 4160 -7.7%; 8256 +5.2%, 16448 +23%; session 32: 6080 -5.9%, 7080
    -0.2%, 7680 +4.2%). ``num_sms``: the GPU's (``Sizes.num_sms``; the H200's 132 by default).
    """
    if max_seq_len < 1 or rows < 1 or Hkv < 1 or D < 1 or num_sms < 1:
        raise ValueError(f"choose_num_splits: max_seq_len={max_seq_len}, rows={rows}, Hkv={Hkv}, D={D}, "
                         f"num_sms={num_sms}")
    kv_bytes = rows * max_seq_len * Hkv * D * 2 * 2  # K and V, bf16
    per_sm = 1 if kv_bytes <= one_per_sm_bytes() * num_sms // ONE_PER_SM_REF_SMS else 2
    want = per_sm * num_sms // (rows * Hkv)  # CTAs per (row, kv head) that still fit in one wave
    by_len = max_seq_len // min_keys_per_split()
    return max(1, min(want, by_len, max_splits()))


def one_per_sm_bytes() -> int:
    """FIXEDGRAPH_ATTN_ONE_PER_SM_MIB (default ONE_PER_SM_MIB; 0: always two CTAs per SM, the
    policy before session 31): the largest K/V a decode launch reads, at its graph's longest
    context, that still plans one attention CTA per SM. An A/B knob."""
    return _env_count("FIXEDGRAPH_ATTN_ONE_PER_SM_MIB", ONE_PER_SM_MIB, "MiB", minimum=0) << 20


def _env_count(name: str, default: int, what: str, minimum: int = 1) -> int:
    """An integer knob of at least ``minimum`` from the environment; anything else is refused,
    naming it."""
    raw = os.environ.get(name, str(default))
    try:
        n = int(raw)
    except ValueError:
        n = minimum - 1
    if n < minimum:
        raise ValueError(f"{name}={raw!r}: give a whole number of {what}, {minimum} or more (default {default})")
    return n


def max_splits() -> int:
    """FIXEDGRAPH_ATTN_MAX_SPLITS (default MAX_SPLITS): the most splits a graph plans per (row, kv
    head). An A/B knob for long contexts: fewer, longer splits merge in fewer rounds of 8 partials
    and put fewer CTAs beside the GEMV before the attention."""
    return _env_count("FIXEDGRAPH_ATTN_MAX_SPLITS", MAX_SPLITS, "splits")


def min_keys_per_split() -> int:
    """FIXEDGRAPH_ATTN_MIN_KEYS (default MIN_KEYS_PER_SPLIT): the fewest keys a graph's split
    count plans per split at its context bucket (an A/B knob; see choose_num_splits)."""
    return _env_count("FIXEDGRAPH_ATTN_MIN_KEYS", MIN_KEYS_PER_SPLIT, "keys")


# Tile sharing (FIXEDGRAPH_ATTN_STEAL, the ``_st`` entries: decode_tc's STEAL in attention_decode.cuh).
# A split's CTA takes its first two tiles by its index and then takes tiles from a (row, kv head)
# counter until none is left, so that CTAs which start late (beside the predecessor's CTAs, or
# after them) take fewer tiles instead of finishing last. The row's whole block table sits in
# shared memory (4 bytes a block after the tiles), so the take is one atomic a tile and never a
# block-table round trip. Planned by default from STEAL_MIN_SPLITS splits on at head dim 128 (where
# it was measured), for one pass of query heads; FIXEDGRAPH_ATTN_STEAL=2 plans it wherever it
# fits (any split count, head dims 64, 96 and 128: an A/B mode, which loses 3-4% a token on
# Qwen3-0.6B at 16 splits; session 44).
STEAL_MIN_SPLITS = 24
STEAL_MAX_TABLE_BYTES = 32 << 10  # the shared block table's ceiling: two CTAs an SM still fit
DEC_MAX_HEADS = 16  # query heads in one pass of the plain decode body (attention_decode.cuh kDecMaxHeads)


def steal_table_bytes(max_blocks: int) -> int:
    """Dynamic shared bytes an ``_st`` CTA adds after its tiles: the row's whole block table."""
    return 4 * int(max_blocks)


def steal_mode() -> str:
    """FIXEDGRAPH_ATTN_STEAL: "1" (the default) plans the fused decode's tile-sharing ``_long_st``
    entry at head dim 128 from STEAL_MIN_SPLITS splits where it fits (``steal_fits``), "2" the
    ``_st`` entries at any split count and head dim they fit (an A/B mode; session 44 on the
    H200, same call, Qwen3-0.6B ms/token: +3.2% / +3.6% at 4176 keys (16 splits), +0.6% at 128 +
    256: it loses below 24 splits; session 47 on the H100, same call, at d64: Llama-3.2-1B −0.5 / −2.2 /
    −2.4 / −1.0% at 128 + 256 / 4k / 8k / 16k keys, Qwen2.5-0.5B level / +0.6 / −2.2 / +2.7%, so no
    d64 rule yet; d96 unmeasured), "0" never. Session 43, same-call A/Bs on the H200,
    ms/token: Qwen3-0.6B -5.1% at 8k keys and -3.0% at 32k, Qwen3-8B -0.8% at 8k and -0.9% at
    16k (the ``_sw`` entry of a like register footprint: level with the default at 32k, so the
    gain is the sharing). Alone (``attention_decode``, bench_kernels) the sharing costs 2-3% at
    8k-16k keys and gains 1.3% at 32k: there the CTAs start together."""
    raw = os.environ.get("FIXEDGRAPH_ATTN_STEAL", "1").strip()
    if raw not in ("0", "1", "2"):
        raise ValueError(f"FIXEDGRAPH_ATTN_STEAL={raw!r}: give 1 (the default: decode attention CTAs "
                         f"share a row's tiles at run time, at head dim 128 from {STEAL_MIN_SPLITS} "
                         f"splits on), 2 (wherever the sharing entries fit) or 0 (each split keeps "
                         f"its own key range)")
    return raw


def steal_fits(D: int, Hq: int, Hkv: int, max_blocks: int, max_group: int,
               dims: tuple[int, ...] = (128,)) -> str:
    """Why a tile-sharing ``_st`` entry cannot take this launch ("" when it can): a head dim in
    ``dims`` (the entries there are), one pass of at most ``max_group`` query heads a kv head, and
    the block table in shared memory."""
    if D not in dims:
        return f"head_dim {D} (the _st entries take {', '.join(map(str, dims))})"
    if Hq // Hkv > max_group:
        return f"a GQA group of {Hq // Hkv} query heads (at most {max_group}: one pass)"
    table = steal_table_bytes(max_blocks)
    if table > STEAL_MAX_TABLE_BYTES:
        return (f"max_blocks={max_blocks}: its block table ({table} bytes) exceeds the "
                f"{STEAL_MAX_TABLE_BYTES} bytes of shared memory it may take")
    return ""


def _steal(op: str, steal: bool | None, S: int, D: int, Hq: int, Hkv: int, max_blocks: int,
           max_group: int, dims: tuple[int, ...] = (128,)) -> bool:
    """Whether a decode launch takes an ``_st`` entry: ``steal`` True (required: refused with
    the reason when it cannot), False, or None (``steal_mode``: 1 at head dim 128 from
    STEAL_MIN_SPLITS splits, 2 wherever it fits, 0 never)."""
    why = steal_fits(D, Hq, Hkv, max_blocks, max_group, dims)
    if steal is None:
        mode = steal_mode()
        if why or mode == "0":
            return False
        return mode == "2" or (S >= STEAL_MIN_SPLITS and D == 128)
    if steal and why:
        raise ValueError(f"{op}: steal=True cannot take {why}; pass steal=None or False")
    return bool(steal)


def _ptr(a: Arg | None) -> Arg:
    return Null() if a is None else a


def _split_scratch(op: str, scratch: dict[str, Arg] | None, rows: int, Hq: int, Hkv: int, D: int,
                   S: int) -> tuple[Arg, Arg, Arg]:
    """(o_part, ml_part, counters) of a decode launch: NULL when S == 1, else the named regions."""
    if S <= 1:
        return Null(), Null(), Null()
    need = decode_scratch(rows, Hq, D, S, Hkv)
    missing = [n for n in need if not scratch or n not in scratch]
    if missing:
        raise ValueError(f"{op}: num_splits={S} needs scratch regions {missing} "
                         f"(plan them with decode_scratch(rows, Hq, D, num_splits, Hkv))")
    return scratch[SCRATCH_O], scratch[SCRATCH_ML], scratch[SCRATCH_COUNT]


def attention_decode(prog: Program, out: Arg, q: Arg, k_pool: Arg, v_pool: Arg, block_table: Arg,
                     seq_len: Arg, scratch: dict[str, Arg] | None, rows: int, max_blocks: int,
                     block_size: int, Hq: int, Hkv: int, D: int, scale: float, num_splits: int,
                     label: str = "attention_decode", swap: bool = False, steal: bool | None = False) -> int:
    """Attention of one query token per row over its sequence's paged K/V, in one launch.

    out: [rows, Hq * D] bf16, written. q: [rows, Hq * D] bf16 (RoPE applied).
    k_pool, v_pool: [num_blocks, block_size, Hkv, D] bf16.
    block_table: [rows, max_blocks] i32. seq_len: [rows] i32; row r attends keys
      0..seq_len[r]-1 (clamped to max_blocks * block_size; 0 gives zeros). Padding rows:
      seq_len 1 and a block table pointing at a dummy block.
    scratch: regions named by ``decode_scratch(rows, Hq, D, num_splits, Hkv)``; None when S == 1.
      Its counter region must be zero before the first launch and is zero after every launch.
    num_splits: S fixed for the graph (see ``choose_num_splits``); a row of n keys is cut into
      pieces of K = round_up(ceil(n / S), block_size) keys, split s covering [s*K, (s+1)*K). With
      several non-empty splits each writes its partial (o, m, l) to scratch and the last to
      arrive on the (row, kv head) counter merges them into out; no second launch.
    fp32 softmax; P.V on tensor cores with P as bf16 hi + lo (D <= 128), fp32 for D = 256.
    swap: the ``_sw`` entry (D = 128: query heads on the MMA's N, as the fused ``_sw`` entries),
      the same results up to the order of fp32 sums.
    steal: the tile-sharing ``paged_attention_decode_st_d128`` (True; see ``steal_mode``; not
      with swap), the per-split ranges (False, the default: alone, without a neighbour's CTAs
      to start beside, the sharing measured 2-3% slower at 8k-16k keys), or None:
      ``FIXEDGRAPH_ATTN_STEAL`` from STEAL_MIN_SPLITS splits where it fits. The same results up
      to the order of fp32 sums.
    Returns the op index.
    """
    op = "attention_decode"
    _check_heads(op, Hq, Hkv, D, DECODE_HEAD_DIMS)
    if rows < 1 or max_blocks < 1 or block_size < 1 or num_splits < 1:
        raise ValueError(f"{op}: rows={rows}, max_blocks={max_blocks}, block_size={block_size}, "
                         f"num_splits={num_splits} must all be >= 1")
    if swap and D != 128:
        raise ValueError(f"{op}: the heads-on-N (_sw) entry exists for head_dim 128, not {D}")
    S = int(num_splits)
    if swap and steal:
        raise ValueError(f"{op}: swap and steal together have no entry; pass one of them")
    st = not swap and _steal(op, steal, S, D, Hq, Hkv, max_blocks, DEC_MAX_HEADS)
    entry = ("paged_attention_decode_sw_d128" if swap else "paged_attention_decode_st_d128" if st
             else f"paged_attention_decode_d{D}")
    o_part, ml_part, counters = _split_scratch(op, scratch, rows, Hq, Hkv, D, S)
    args = (out, o_part, ml_part, counters, q, k_pool, v_pool, block_table, seq_len, int(rows),
            int(max_blocks), int(block_size), int(Hq), int(Hkv), int(D), S, float(scale))
    return prog.launch(entry, (Hkv, rows, S), (DECODE_THREADS, 1, 1),
                       args, shared=decode_shared_bytes(D) + (steal_table_bytes(max_blocks) if st else 0),
                       label=label)


def attention_decode_rope(prog: Program, out: Arg, qkv: Arg, q_norm: Arg | None, k_norm: Arg | None,
                          rope: Arg, positions: Arg, slots: Arg, k_pool: Arg, v_pool: Arg,
                          block_table: Arg, seq_len: Arg, scratch: dict[str, Arg] | None, rows: int,
                          max_blocks: int, block_size: int, Hq: int, Hkv: int, D: int, scale: float,
                          eps: float, num_splits: int, label: str = "attention_decode_rope",
                          swap: bool | str | None = None, steal: bool | None = None) -> int:
    """``qk_norm_rope_kv`` then ``attention_decode`` in one launch (no q buffer round trip).

    out: [rows, Hq * D] bf16, written.
    qkv: [rows, (Hq + 2*Hkv) * D] bf16, q heads then k heads then v heads (bias already added).
    q_norm, k_norm: [D] bf16 per-head RMSNorm weights (Qwen3 QK-norm), or None for no norm.
    rope: [max_pos, D/2, 2] f32 (cos, sin); rotate_half pairing (i, i + D/2). positions: [rows] u32.
    slots: [rows] i64 KV slot of each row's token; negative = no KV write (padding rows; their
      attention then reads key seq_len-1 from the pool as it is).
    k_pool, v_pool: [num_blocks, block_size, Hkv, D] bf16; the rotated k and raw v of row r land
      at element slots[r] * Hkv * D + h * D, bit-identical to what ``qk_norm_rope_kv`` writes.
    block_table, seq_len, scratch, num_splits: as ``attention_decode``.
    NOTE: a row's current token (key seq_len[r] - 1) is used straight from the CTA that computes
    it, never read back from the pool, so the engine's invariant ``slots[r] == block_table[r][
    (seq_len[r]-1) // block_size] * block_size + (seq_len[r]-1) % block_size`` must hold for every
    live row (it does: kvcache.slot); live slots must be distinct. q, k, out match the two-launch
    path bit for bit. Every region must be 16-byte aligned (arena regions are).
    swap: "sw" (or True) the ``_sw`` entries (query heads on the MMA's N, in passes of 8; the
      same results up to the order of fp32 sums), "swp" the ``_swp`` ones (the same code holding
      idle registers), "" (or False) the plain ones; None: ``choose_swap`` (FIXEDGRAPH_ATTN_SWAP;
      by default "swp" for GQA groups of at most 8).
    PDL: the kernel issues its first K/V tiles before it waits on its predecessor, so the op
    launched just before it may write ``qkv`` but none of block_table, seq_len, positions, slots
    or the pools (in decode programs the staging kernel writes those at least two launches
    earlier; a grid starts only after every grid before its predecessor has completed).
    steal: a tile-sharing entry, ``steal_rope_entry`` (True: heads on N, GQA groups of at most 8;
      split 0 then writes the current token's K/V), the entry ``decode_rope_entry`` picks (False),
      or None: ``steal_mode`` (by default ``_long_st`` at head dim 128 from STEAL_MIN_SPLITS
      splits where it fits). The same results up to the order of fp32 sums.
    D in (64, 96, 128). Returns the op index.
    """
    op = "attention_decode_rope"
    _check_heads(op, Hq, Hkv, D, DECODE_ROPE_HEAD_DIMS)
    if rows < 1 or max_blocks < 1 or block_size < 1 or num_splits < 1:
        raise ValueError(f"{op}: rows={rows}, max_blocks={max_blocks}, block_size={block_size}, "
                         f"num_splits={num_splits} must all be >= 1")
    st = _steal(op, steal, int(num_splits), D, Hq, Hkv, max_blocks, SWAP_MAX_GROUP, DECODE_ROPE_HEAD_DIMS)
    entry = (steal_rope_entry(D, int(num_splits)) if st else
             decode_rope_entry(D, int(num_splits), choose_swap(D, Hq, Hkv, int(num_splits)) if swap is None else swap))
    o_part, ml_part, counters = _split_scratch(op, scratch, rows, Hq, Hkv, D, int(num_splits))
    args = (out, o_part, ml_part, counters, qkv, _ptr(q_norm), _ptr(k_norm), rope, positions, slots,
            k_pool, v_pool, block_table, seq_len, int(rows), int(max_blocks), int(block_size),
            int(Hq), int(Hkv), int(D), int(num_splits), float(scale), float(eps))
    return prog.launch(entry, (Hkv, rows, int(num_splits)),
                       (DECODE_THREADS, 1, 1), args,
                       shared=decode_shared_bytes(D) + smem_pad_bytes() + (steal_table_bytes(max_blocks) if st else 0),
                       label=label)


def smem_pad_bytes() -> int:
    """FIXEDGRAPH_ATTN_SMEM_PAD_KB (default 0): extra dynamic shared memory a fused decode
    attention CTA asks for (unused by the kernel). An A/B knob for CTA placement: past ~106 KB of
    tiles and pad, two CTAs of the launch no longer fit one SM's 228 KB, so CTAs launched early
    beside the predecessor's cannot double up on the SMs it left free."""
    return _env_count("FIXEDGRAPH_ATTN_SMEM_PAD_KB", 0, "KB", minimum=0) << 10


# From this many splits on, d128 takes the long-context entry, whose split merge loads 16
# partials a round instead of 8 (two L2 round trips at 32 splits instead of four). Fewer splits
# keep the short entry: its merge code is what the 0.6B bench's buckets run (sessions 27-28
# measured every growth of it as a loss there). Launches of 16 splits (2-6k keys, one CTA per SM)
# on the long entry lost too (session 34: 0.6B +1.3% a token at 4176 keys, +0.6% at 2980).
LONG_MERGE_MIN_SPLITS = 24


def decode_rope_entry(D: int, num_splits: int, swap: bool | str = "") -> str:
    """The fused decode attention entry (QK-norm + RoPE + KV write + split-K decode) to launch.

    For head dim D at ``num_splits`` splits: ``paged_attention_decode_rope_long{sw}_d128`` from
    LONG_MERGE_MIN_SPLITS on (D = 128; off with FIXEDGRAPH_ATTN_LONG_MERGE=0), else
    ``paged_attention_decode_rope{sw}_d{D}``. ``swap``: "" / False (``sw`` empty), "sw" / True
    (``_sw``: query heads on the MMA's N) or "swp" (``_swp``: ``_sw``'s code holding idle
    registers up to the plain entry's footprint)."""
    mode = ("sw" if swap else "") if isinstance(swap, bool) else swap
    if mode not in ("", "sw", "swp"):
        raise ValueError(f"decode_rope_entry: swap={swap!r}: give '', 'sw' or 'swp'")
    sw = "_" + mode if mode else ""
    if D == 128 and num_splits >= LONG_MERGE_MIN_SPLITS and os.environ.get("FIXEDGRAPH_ATTN_LONG_MERGE", "1") != "0":
        return f"paged_attention_decode_rope_long{sw}_d128"
    return f"paged_attention_decode_rope{sw}_d{D}"


# The largest GQA group the _sw entries take (choose_swap): one pass of 8 heads on N.
SWAP_MAX_GROUP = 8


def choose_swap(D: int, Hq: int, Hkv: int, num_splits: int = 1) -> str:
    """Which heads-on-N form a fused decode launch takes ("sw", "swp" or "": decode_rope_entry), by
    FIXEDGRAPH_ATTN_SWAP: 3 (the default) ``_swp`` at every head dim and split count, 2 only at
    head dim 128 below LONG_MERGE_MIN_SPLITS splits, 1 ``_sw`` at every head dim and split count,
    0 never; always only for GQA groups of at most SWAP_MAX_GROUP heads (larger groups fill the
    plain entry's 16 MMA rows better). Session 35 (same-call A/B, two rounds): ``_swp`` on
    Qwen3-0.6B -2.3% a token at 4176 keys, Qwen3-8B -0.3% at 4k; ``_sw``, whose 183 registers let
    one of its CTAs onto an SM beside two of norm + qkv's, +6.5% on 0.6B at 128 + 512. Session 36,
    3 against 2: Llama-3.2-1B / Qwen2.5-0.5B (d64) -0.8% / -0.9% at 4k, Qwen3-8B -0.4% at 16k,
    Qwen3-0.6B -0.4% at 32k and +0.0% / +0.5% at 16k."""
    mode = _swap_mode()
    if mode == "0" or D not in DECODE_ROPE_HEAD_DIMS or Hkv < 1 or Hq // Hkv > SWAP_MAX_GROUP:
        return ""
    if mode == "1":
        return "sw"
    return "swp" if mode == "3" or (D == 128 and num_splits < LONG_MERGE_MIN_SPLITS) else ""


def _swap_mode() -> str:
    """FIXEDGRAPH_ATTN_SWAP: 3 (default; see choose_swap), 2, 1 or 0."""
    raw = os.environ.get("FIXEDGRAPH_ATTN_SWAP", "3").strip()
    if raw not in ("0", "1", "2", "3"):
        raise ValueError(f"FIXEDGRAPH_ATTN_SWAP={raw!r}: give 3 (default: _swp at every head dim and "
                         f"split count), 2 (_swp only at d128's short entry), 1 (the _sw entries) or 0 "
                         f"(never; query heads on the attention MMA's M)")
    return raw


def steal_rope_entry(D: int, num_splits: int) -> str:
    """The fused tile-sharing entry at head dim D: ``paged_attention_decode_rope_long_st_d128``
    from LONG_MERGE_MIN_SPLITS splits at D = 128 (16 partials a merge round), else
    ``paged_attention_decode_rope_st_d{D}`` (8 a round)."""
    if D not in DECODE_ROPE_HEAD_DIMS:
        raise ValueError(f"steal_rope_entry: head_dim {D} has no tile-sharing entry")
    if D == 128 and num_splits >= LONG_MERGE_MIN_SPLITS:
        return "paged_attention_decode_rope_long_st_d128"
    return f"paged_attention_decode_rope_st_d{D}"


# Every entry decode_rope_entry and steal_rope_entry can return: fixedgraph.pdl checks their
# pre-wait reads.
DECODE_ROPE_ENTRIES = frozenset({*(f"paged_attention_decode_rope_d{d}" for d in DECODE_ROPE_HEAD_DIMS),
                                 *(f"paged_attention_decode_rope_sw_d{d}" for d in DECODE_ROPE_HEAD_DIMS),
                                 "paged_attention_decode_rope_long_d128", "paged_attention_decode_rope_long_sw_d128",
                                 *(f"paged_attention_decode_rope_swp_d{d}" for d in DECODE_ROPE_HEAD_DIMS),
                                 "paged_attention_decode_rope_long_swp_d128",
                                 "paged_attention_decode_rope_long_st_d128",
                                 *(f"paged_attention_decode_rope_st_d{d}" for d in DECODE_ROPE_HEAD_DIMS)})


def attention_combine(prog: Program, out: Arg, scratch: dict[str, Arg], rows: int, Hq: int, D: int,
                      num_splits: int, label: str = "attention_combine") -> int:
    """Legacy: merge S split partials into out. ``attention_decode`` no longer needs it.

    out: [rows, Hq * D] bf16, written. scratch: ``SCRATCH_O`` [rows, Hq, S, D] f32 (normalised
    per split) and ``SCRATCH_ML`` [rows, Hq, S, 2] f32 (max score in natural-log units, sum exp);
    every split must hold a partial (an empty one: m = -inf, l = 0). Returns the op index.
    """
    block = 64 if D <= 64 else 128
    return prog.launch("paged_attention_combine", (rows * Hq, 1, 1), (block, 1, 1),
                       (out, scratch[SCRATCH_O], scratch[SCRATCH_ML], int(rows), int(Hq), int(D),
                        int(num_splits)), label=label)


def attention_prefill(prog: Program, out: Arg, q: Arg, k_pool: Arg, v_pool: Arg, block_table: Arg,
                      positions: Arg, T: int, max_blocks: int, block_size: int, Hq: int, Hkv: int,
                      D: int, scale: float, label: str = "attention_prefill") -> int:
    """Causal attention of T query tokens of one sequence over its paged K/V (tensor cores).

    out: [T, Hq * D] bf16, written. q: [T, Hq * D] bf16 (RoPE applied).
    k_pool, v_pool: [num_blocks, block_size, Hkv, D] bf16, this chunk's K/V already written.
    block_table: [max_blocks] i32, the sequence's row. positions: [T] u32; token i attends keys
      0..positions[i] (clamped to max_blocks * block_size - 1). Positions need not start at 0
      (chunked prefill: earlier chunks' keys are already in the pool) nor be sorted.
    P is rounded to bf16 for the P.V MMA (fp32 accumulate; the normaliser sums fp32 P).
    Returns the op index.
    """
    op = "attention_prefill"
    _check_heads(op, Hq, Hkv, D, PREFILL_HEAD_DIMS)
    if T < 1 or max_blocks < 1 or block_size < 1:
        raise ValueError(f"{op}: T={T}, max_blocks={max_blocks}, block_size={block_size} "
                         f"must all be >= 1")
    m_tiles = -(-T * (Hq // Hkv) // PREFILL_ROWS_PER_CTA)
    args = (out, q, k_pool, v_pool, block_table, positions, int(T), int(max_blocks),
            int(block_size), int(Hq), int(Hkv), int(D), float(scale))
    return prog.launch(f"paged_attention_prefill_d{D}", (m_tiles, Hkv, 1),
                       (PREFILL_THREADS, 1, 1), args, label=label)

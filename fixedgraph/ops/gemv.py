"""Launchers of ptx/src/gemv.cu: the decode GEMV out = x @ W.T (+ bias) for 1..8 rows, and its
fused forms that build x inside every CTA from the previous op's output, saving that launch:
``gemv_rmsnorm`` (residual add + RMSNorm before qkv, gate_up, lm_head) and ``gemv_silu``
(silu(gate) * up before down_proj).

No scratch memory: when N is small the kernel splits K across the warps of a block (up to 16
warps of a 512-thread block) and reduces in shared memory, so one launch covers the GPU.

Dynamic shared memory is [x rows (fused entries)][W preload: depth batches per warp]: each
warp copies its first W batches there before waiting on its predecessor (see gemv.cu, which
reads the depth off the launch's shared memory size). A batch is PLAIN_UNROLL k32 blocks in the
plain entries (8 KiB per warp; 124 registers, 2 CTAs of 256 threads per SM) and UNROLL in the
fused ones (4 KiB; 80 registers, 3 CTAs per SM). ``preload_depth`` gives a warp its whole share
where that fits with the CTAs per SM the launch can use, else one batch, else none.

Fused launches whose warps' share is a single batch take a smaller k split where the whole,
deeper share still preloads at 3 CTAs per SM (``fused_split``; FIXEDGRAPH_GEMV_FUSED_SPLIT):
Qwen3-0.6B's qkv and gate_up run 128 / 192 CTAs instead of 256 / 384, all resident beside the
previous launch's CTAs (measured 0.679 -> 0.659 ms/token, docs/BENCHMARKS.md session 16).
Plain launches that ``gemv_warps`` would give 512 threads (small N, long K: 0.6B o_proj /
down_proj) take 256 with their whole share preloaded (``plain_warps``; FIXEDGRAPH_GEMV_NARROW),
leaving half of each SM's registers to the next launch's CTAs (0.660 -> 0.653 ms/token), unless
256 threads leave a warp more than one batch that 512 fit in one: each batch after the first
waits on its own x round trip after the previous batch's mmas (0.6B down_proj, K 3072: 2
batches at 256 threads, 1 at 512; session 25's timeline: 0.28 us less a launch).
"""
from __future__ import annotations

import os

from fixedgraph.program import Arg, Null, Program

WARPS = 8  # warps of a normal block (256 threads)
WIDE_WARPS = 16  # warps of a block for small N (512 threads), so one k32 batch per warp covers K
TILE_N = 16  # output columns per warp tile (the mma M dimension)
UNROLL = 4  # k32 blocks in flight per warp (fused entries)
PLAIN_UNROLL = 8  # the plain entries' (GEMV_PLAIN_UNROLL; 124 registers: 2 CTAs of 256 per SM)
TARGET_WARPS = 2048  # ~16 warps per SM on the H200's 132 SMs
MIN_KBLOCKS = 2  # k32 blocks per warp worth splitting K for
MAX_ROWS = 8  # the mma N dimension: W is streamed once for up to 8 rows
NUM_SMS = 132  # H200
CTAS_PER_SM = 3  # 80 registers x 256 threads: 3 CTAs fit an SM's 65536 registers
SMEM_PER_SM = 228 * 1024  # shared memory an SM hands out (1 KiB of it reserved per CTA)
SMEM_PER_BLOCK = 227 * 1024  # the most one CTA may opt in to
STATIC_SMEM = 8768  # the kernels' static shared memory (ptxas -v)
PRELOAD_WARP_BYTES = 2 * UNROLL * 32 * 16  # one warp's first W batch: [UNROLL][2 rows][32 lanes] x 16 B
PLAIN_PRELOAD_WARP_BYTES = 2 * PLAIN_UNROLL * 32 * 16
FUSED_SPLIT_DEFAULT = -1  # FIXEDGRAPH_GEMV_FUSED_SPLIT's default (fused_split): 0 gemv_split, -1 auto
NARROW_DEFAULT = "auto"  # FIXEDGRAPH_GEMV_NARROW's default (narrow_mode)


def gemv_split(N: int, K: int, warps: int = WARPS) -> int:
    """Warps per 16-column tile (K split inside a block); mirrors gemv_split() in gemv.cu.

    A mismatch with the kernel would only change speed: the kernel takes tiles grid-stride.
    """
    tiles = -(-N // TILE_N)
    kblocks = -(-K // 32)
    s = 1
    while s < warps and tiles * s < TARGET_WARPS and kblocks >= 2 * s * MIN_KBLOCKS:
        s *= 2
    return s


def gemv_warps(N: int, K: int) -> int:
    """Warps per block: 16 when even 8-way k splits leave most SMs idle (small N, long K)."""
    if gemv_split(N, K) == WARPS and gemv_groups(N, K, WARPS) < NUM_SMS and gemv_split(N, K, WIDE_WARPS) > WARPS:
        return WIDE_WARPS
    return WARPS


def valid_split(split: int, warps: int) -> bool:
    return split >= 1 and split & (split - 1) == 0 and split <= warps


def gemv_groups(N: int, K: int, warps: int = WARPS, split: int | None = None) -> int:
    """Column groups: one block's worth of tiles (warps // split of them)."""
    S = split or gemv_split(N, K, warps)
    return -(-(-(-N // TILE_N)) // (warps // S))


def gemv_grid(N: int, K: int, split: int | None = None, warps: int | None = None) -> int:
    """Blocks for one plain GEMV launch: one per column group."""
    return gemv_groups(N, K, warps or gemv_warps(N, K), split)


def xs_stride(K: int) -> int:
    """Elements between rows of the fused kernels' shared x; mirrors xs_stride() in gemv.cuh."""
    return (K + 63) // 64 * 64 + 32


def fused_shared(rows: int, K: int) -> int:
    """Dynamic shared memory (bytes) of a fused launch: x as [rows, xs_stride(K)] bf16."""
    return rows * xs_stride(K) * 2


def regs_ctas_per_sm(fused: bool, warps: int) -> int:
    """CTAs of a launch that fit an SM's 65536 registers (fused entries 80 registers a thread,
    plain ones 128): 3 / 2 of 256 threads, 1 of 512."""
    return max(1, 65536 // ((80 if fused else 128) * 32 * warps))


def share_batches(N: int, K: int, warps: int, split: int, fused: bool = True) -> int:
    """W batches in one warp's k slice of a tile: ceil(k32 blocks per slice / batch blocks)."""
    per_slice = -(-(-(-K // 32)) // split)
    return -(-per_slice // (UNROLL if fused else PLAIN_UNROLL))


def preload_depth(rows: int, N: int, K: int, fused: bool = True, warps: int | None = None,
                  split: int | None = None, occupancy: int | None = None) -> int:
    """W batches per warp the launch preloads before its PDL wait (gemv.cu reads the depth off
    the launch's dynamic shared memory): the warp's whole share where that fits with as many
    CTAs per SM as the launch can use (``occupancy``; default: its register limit, or fewer when
    its grid is smaller than that many per SM), else one batch, else none (x alone fills the CTA).
    """
    warps = warps or gemv_warps(N, K)
    S = split or gemv_split(N, K, warps)
    batch = PRELOAD_WARP_BYTES if fused else PLAIN_PRELOAD_WARP_BYTES
    x = fused_shared(rows, K) if fused else 0
    if occupancy is None:
        occupancy = min(regs_ctas_per_sm(fused, warps), -(-gemv_groups(N, K, warps, S) // NUM_SMS))

    def fits(depth: int, ctas: int) -> bool:
        cta = x + warps * depth * batch + STATIC_SMEM
        return cta <= SMEM_PER_BLOCK and ctas * (cta + 1024) <= SMEM_PER_SM

    whole = share_batches(N, K, warps, S, fused)
    if whole > 1 and fits(whole, occupancy):
        return whole
    return 1 if fits(1, 1) else 0


def preload_shared(N: int, K: int, fused: bool = True, depth: int = 1, warps: int | None = None) -> int:
    """Bytes of the W preload area of a launch: ``depth`` batches per warp (UNROLL k32 blocks in
    the fused entries, PLAIN_UNROLL in the plain ones)."""
    return (warps or gemv_warps(N, K)) * depth * (PRELOAD_WARP_BYTES if fused else PLAIN_PRELOAD_WARP_BYTES)


def launch_shared(rows: int, N: int, K: int, fused: bool, preload: bool | int = True, warps: int | None = None,
                  split: int | None = None) -> int:
    """Dynamic shared memory of a launch: x rows (fused) plus the preload area. ``preload``: True
    for ``preload_depth``'s batches, False for none, an int for that many (tests)."""
    x = fused_shared(rows, K) if fused else 0
    if preload is True:
        depth = preload_depth(rows, N, K, fused, warps, split)
    else:
        depth = int(preload)
    return x + preload_shared(N, K, fused, depth, warps)


def fused_split(N: int, K: int, rows: int, split: int | None = None) -> int:
    """The k split of a fused launch: ``split`` if given, else FIXEDGRAPH_GEMV_FUSED_SPLIT
    (default FUSED_SPLIT_DEFAULT): 0 for gemv_split's; S > 0 for S (where valid); -1 (auto):
    where gemv_split's plan needs several rounds of CTAs (more column groups than fit at once)
    or the weights are STREAMING_BYTES or more, the smallest split from gemv_split's up whose
    grid fills FILL of the CTA slots, else the finest tried (several rounds: finer groups even
    out the SMs' shares, Llama-3-8B's gate_up 224 -> 359 CTAs) or the smallest with the most
    CTAs (one round: Qwen2.5-7B's gate_up 296 -> 395, Qwen3-4B's stays at 304);
    else the smallest split that still preloads each warp's whole share at full occupancy, taken
    only where gemv_split's share is a single batch and its grid has more CTAs than the GPU has
    SMs (small layers: fewer, deeper CTAs, so a launch fits beside its predecessor's CTAs;
    measured on Qwen3-0.6B's qkv and gate_up); else gemv_split's."""
    warps = gemv_warps(N, K)
    default = gemv_split(N, K, warps)
    if split is not None:
        return split
    raw = os.environ.get("FIXEDGRAPH_GEMV_FUSED_SPLIT", str(FUSED_SPLIT_DEFAULT))
    try:
        want = int(raw)
    except ValueError:
        raise ValueError(f"FIXEDGRAPH_GEMV_FUSED_SPLIT={raw!r} is not an integer: use 0 (gemv_split), -1 (auto) "
                         "or a power of two up to the block's warps") from None
    if want > 0:
        if not valid_split(want, warps):
            raise ValueError(f"FIXEDGRAPH_GEMV_FUSED_SPLIT={want} is not a power of two <= {warps} (the warps of a "
                             f"block for N={N}, K={K}); use 0 (gemv_split), -1 (auto) or such a split")
        return want
    if want == 0:
        return default
    rounds = fused_rounds(N, K, rows, default)
    if rounds > 1 or N * K * 2 >= STREAMING_BYTES:
        # Streaming layers (more column groups than CTAs fit at once, or weights that take
        # 15 us and more to stream): the smallest split whose grid fills FILL of the CTA slots,
        # else the finest groups. Llama-3-8B's gate_up (28672 x 4096) at split 2 ran 224 CTAs of two
        # groups, 60.6 us alone; at split 8, 359 CTAs of five, 57.5 (session 21). Qwen3-8B's
        # gate_up (384 CTAs at split 2) and qkv (384 at 8) keep theirs. A one-round plan moves
        # only for more CTAs: Qwen3-4B's gate_up (19456 x 2560) has 304 at splits 2, 4 and 8
        # alike and keeps 2 (finer groups on the same CTAs were never measured to help there).
        slots = NUM_SMS * _fused_plan(N, K, rows, default)[2]
        S, best, best_grid = default, default, fused_grid(N, K, rows, default)
        while S < warps and best_grid < FILL * slots and -(-K // 32) >= 2 * S * MIN_KBLOCKS:
            S *= 2
            grid = fused_grid(N, K, rows, S)
            if grid > best_grid or rounds > 1:
                best, best_grid = S, max(grid, best_grid)
        return best
    if share_batches(N, K, warps, default) > 1 or gemv_groups(N, K, warps, default) <= NUM_SMS:
        return default  # deeper already, or few enough CTAs to fit beside the predecessor's
    full = regs_ctas_per_sm(True, warps)
    S = 1
    while S < default:
        whole = share_batches(N, K, warps, S)
        if preload_depth(rows, N, K, True, warps, S, occupancy=full) == whole:
            return S
        S *= 2
    return default


CARVEOUT_DEFAULT = "default"  # FIXEDGRAPH_GEMV_CARVEOUT's default (preloaded_carveout): off, see below


def preloaded_carveout(depth: int, share: int) -> int | None:
    """The carveout (percent) a plain launch asks for: with FIXEDGRAPH_GEMV_CARVEOUT=max, 100
    (the most shared memory) when its warps preload their whole share of W (``depth >=
    share``), so nothing streams through L1 after its wait; else None, the kernel's own (which
    keeps L1 room for streamed loads: max shared on every kernel made Qwen3-8B 38% slower).
    Default "default": never (measured below).

    Why it exists: an SM's shared-memory size is set only while it is idle, and the driver sizes
    it per kernel for that kernel's own occupancy (0.6B's o_proj / down_proj), so under PDL the
    next launches' 77 KiB CTAs cannot land beside them and pack three to an SM elsewhere (0.6B's
    qkv on 49 SMs). The same preference as a *function* attribute of gemv_bf16_vec spread qkv
    to ~75 SMs and gate_up to ~110 and ran 0.6B 0.4% faster; as this per-launch attribute (a
    graph node attribute) it ran 0.6B 3% slower (docs/BENCHMARKS.md session 19), so it stays an
    A/B knob until that difference is understood."""
    raw = os.environ.get("FIXEDGRAPH_GEMV_CARVEOUT", CARVEOUT_DEFAULT).strip().lower()
    if raw not in ("max", "default"):
        raise ValueError(f"FIXEDGRAPH_GEMV_CARVEOUT={raw!r}: use \"max\" (fully preloaded plain GEMVs prefer "
                         "the most shared memory) or \"default\" (the kernel's own)")
    return 100 if raw == "max" and depth >= share >= 1 else None


def narrow_mode() -> str:
    """FIXEDGRAPH_GEMV_NARROW (default NARROW_DEFAULT) for plain GEMVs that gemv_warps gives 512
    threads (small N, long K: 0.6B o_proj / down_proj): "1" takes 256 threads, half an SM's
    registers, with a deeper preload, leaving room for the next launch's CTAs; "0" keeps 512;
    "auto" takes 256 unless that leaves a warp's k slice more than one batch which 512 threads
    cover in one (``plain_warps``)."""
    raw = os.environ.get("FIXEDGRAPH_GEMV_NARROW", NARROW_DEFAULT)
    if raw not in ("0", "1", "auto"):
        raise ValueError(f"FIXEDGRAPH_GEMV_NARROW={raw!r}: use 1 (256-thread CTAs), 0 (512) or auto "
                         f"(256 unless 512 turn a warp's several batches into one; default {NARROW_DEFAULT})")
    return raw


def plain_warps(N: int, K: int, narrow: bool | None = None) -> int:
    """Warps per block of a plain launch: gemv_warps, or WARPS where it gives WIDE_WARPS and the
    launch goes narrow (``narrow``; None: narrow_mode(), whose "auto" stays wide only where that
    turns a warp's several batches into one)."""
    warps = gemv_warps(N, K)
    if warps != WIDE_WARPS:
        return warps
    if narrow is None:
        mode = narrow_mode()
        if mode == "auto":
            narrow = not (share_batches(N, K, WARPS, gemv_split(N, K, WARPS), fused=False) > 1
                          and share_batches(N, K, WIDE_WARPS, gemv_split(N, K, WIDE_WARPS), fused=False) == 1)
        else:
            narrow = mode == "1"
    return WARPS if narrow else warps


FILL = 0.9  # fused_split: the share of CTA slots a streaming layer's grid should fill
STREAMING_BYTES = 64 << 20  # fused_split: weights from which a layer is planned for streaming


def _fused_plan(N: int, K: int, rows: int, split: int | None) -> tuple[int, int, int]:
    """(column groups, rounds, CTAs per SM): how many groups a fused launch has, how many each
    CTA takes when no more CTAs are launched than fit the GPU at once, and how many fit an SM."""
    warps = gemv_warps(N, K)
    per_sm = max(1, min(CTAS_PER_SM * WARPS // warps,
                        SMEM_PER_SM // (launch_shared(rows, N, K, True, split=split) + STATIC_SMEM + 1024)))
    groups = gemv_groups(N, K, warps, split)
    return groups, -(-groups // (NUM_SMS * per_sm)), per_sm


def fused_rounds(N: int, K: int, rows: int, split: int | None = None) -> int:
    """Column groups each CTA of a fused launch takes (1: one group per CTA, all at once)."""
    return _fused_plan(N, K, rows, split)[1]


def fused_grid(N: int, K: int, rows: int, split: int | None = None) -> int:
    """Blocks of a fused launch: no more than fit at once (each CTA builds x once, then takes
    column groups grid-stride), balanced so every CTA takes the same number of groups."""
    groups, rounds, _ = _fused_plan(N, K, rows, split)
    return -(-groups // rounds)


def _split_arg(N: int, K: int, split: int | None, warps: int | None = None) -> int:
    """The kernel's ``split`` argument: the launcher's choice (validated), else gemv_split."""
    warps = warps or gemv_warps(N, K)
    if split is None:
        return gemv_split(N, K, warps)
    if not valid_split(split, warps):
        raise ValueError(f"gemv split {split} is not a power of two <= {warps} (warps per block for N={N}, K={K})")
    return split


def _check(name: str, rows: int, N: int, K: int) -> tuple[int, int, int]:
    rows, N, K = int(rows), int(N), int(K)
    if not 1 <= rows <= MAX_ROWS:
        raise ValueError(f"{name} takes 1..{MAX_ROWS} rows, got {rows}; use fixedgraph.ops.gemm.gemm (or linear) for more")
    if not (1 <= N < 1 << 31 and 1 <= K < 1 << 31):
        raise ValueError(f"{name} needs 1 <= N, K < 2**31; got N={N}, K={K}")
    return rows, N, K


def _ptr(a: Arg | None) -> Arg:
    return Null() if a is None else a


def lean_enabled(lean: bool | None = None) -> bool:
    """Whether launches that fit take the lean entries (``gemv_bf16_vec``, ``gemv_rmsnorm_bf16_row``: only the
    decode path compiled, a third of the code): ``lean`` if given, else FIXEDGRAPH_GEMV_LEAN
    (default on; "0" keeps the generic entries everywhere)."""
    if lean is not None:
        return bool(lean)
    return os.environ.get("FIXEDGRAPH_GEMV_LEAN", "1") != "0"


def norm_defer_mode(defer: int | bool | None = None) -> int:
    """Which form the one-row norm GEMVs take: 0 ``gemv_rmsnorm_bf16_row``; 1 its deferred-norm form
    ``gemv_rmsnorm_bf16_row_dn`` (x = bf16(norm_w * h), each output scaled by 1 / rms after the
    multiply; results agree with _row's to about one bf16 step); 2 ``gemv_rmsnorm_bf16_row_dw`` (the
    same, x built warp by warp with no CTA barrier before the multiply) where a warp's k slice fits
    (``row_warp_fits``), else _dn. ``defer`` if given (True: 1), else FIXEDGRAPH_NORM_DEFER
    (default 0: A/B entries until measured)."""
    if defer is not None:
        mode = int(defer)
    else:
        raw = os.environ.get("FIXEDGRAPH_NORM_DEFER", "0").strip()
        if raw not in ("0", "1", "2"):
            raise ValueError(f"FIXEDGRAPH_NORM_DEFER={raw!r}: use 0 (default), 1 (the deferred-norm row entry) or 2 "
                             "(its warp-private form where it fits)")
        mode = int(raw)
    if mode not in (0, 1, 2):
        raise ValueError(f"norm defer mode {defer!r}: 0, 1 or 2")
    return mode


def row_warp_fits(K: int, split: int) -> bool:
    """gemv_rmsnorm_bf16_row_dw builds a warp's k slice with one 8-element chunk a lane: at most 8
    k32 blocks a slice (Qwen3-0.6B's K = 1024 at split 4)."""
    return -(-K // 32) <= 8 * split


def _row_entry_for(N: int, K: int, rows: int, split: int | None, defer: int | bool | None) -> str:
    """The one-row norm GEMV entry of a launch on the row path (norm_defer_mode)."""
    mode = norm_defer_mode(defer)
    if mode == 2 and row_warp_fits(K, _split_arg(N, K, fused_split(N, K, rows, split))):
        return "gemv_rmsnorm_bf16_row_dw"
    return "gemv_rmsnorm_bf16_row_dn" if mode else "gemv_rmsnorm_bf16_row"


ROW_ENTRIES = ("gemv_rmsnorm_bf16_row", "gemv_rmsnorm_bf16_row_dn", "gemv_rmsnorm_bf16_row_dw")  # mode bits below


def _aligned(a: Arg | None, n: int) -> bool:
    """An arena pointer is n-byte aligned when its offset is (regions are 256-byte aligned)."""
    return a is None or isinstance(a, Null) or getattr(a, "offset", 0) % n == 0


def vec_path(K: int, x: Arg, w: Arg) -> bool:
    """The 16-byte body applies: K % 8 == 0 and 16-byte aligned x and W (gemv_bf16_vec)."""
    return K % 8 == 0 and _aligned(x, 16) and _aligned(w, 16)


def row_path(rows: int, N: int, K: int, hidden_in: Arg, delta: Arg | None, hidden_out: Arg | None,
             norm_w: Arg, w: Arg) -> bool:
    """The one-row register RMSNorm and the 16-byte body apply (gemv_rmsnorm_bf16_row)."""
    return (rows == 1 and K % 8 == 0 and K <= 16 * 32 * gemv_warps(N, K) and _aligned(hidden_in, 16)
            and _aligned(hidden_out, 16) and _aligned(delta, 8) and _aligned(norm_w, 8) and _aligned(w, 16))


def gemv(prog: Program, out: Arg, x: Arg, w: Arg, bias: Arg | None, rows: int, N: int, K: int,
         out_f32: bool = False, label: str = "", preload: bool | int = True, split: int | None = None,
         lean: bool | None = None, narrow: bool | None = None) -> int:
    """out[r, n] = sum_k x[r, k] * w[n, k] (+ bias[n]), fp32 accumulation, rounded once.

    out: [rows, N] bf16, or f32 when ``out_f32`` (logits); written.
    x: [rows, K] bf16. w: [N, K] bf16 (PyTorch Linear layout, row-major).
    bias: [N] bf16, or None / Null() for no bias; added in fp32 before rounding.
    rows: 1..8 (use ``fixedgraph.ops.linear.linear`` to pick GEMM above 8).
    Any K works; K % 8 == 0 with 16-byte-aligned x and w takes the fast 16-byte-load path.
    preload: True: the W preload area of ``preload_depth``; False: none, an int: that many
      batches per warp (both only to test those paths).
    split: warps per 16-column tile (a power of two <= the block's warps); None: gemv_split.
    narrow: 256-thread CTAs where gemv_warps picks 512 (``plain_warps``); None: narrow_mode().
    lean: take ``gemv_bf16_vec`` (the same results, a third of the code) where it applies; None:
      ``lean_enabled()``.
    Returns the op index.
    """
    rows, N, K = _check("gemv", rows, N, K)
    entry = "gemv_bf16_f32out" if out_f32 else "gemv_bf16"
    vec = vec_path(K, x, w)  # the 16-byte body, the only one that preloads
    if entry == "gemv_bf16" and lean_enabled(lean) and vec:
        entry = "gemv_bf16_vec"
    warps = plain_warps(N, K, narrow)
    S = _split_arg(N, K, split, warps)
    depth = preload_depth(rows, N, K, False, warps, S) if preload is True else int(preload)
    shared = launch_shared(rows, N, K, False, depth, warps, S)
    if shared + STATIC_SMEM > SMEM_PER_BLOCK:
        raise ValueError(f"gemv: a W preload of {shared} bytes does not fit a CTA's {SMEM_PER_BLOCK - STATIC_SMEM}; "
                         "give fewer batches (preload=True picks what fits)")
    carveout = preloaded_carveout(depth, share_batches(N, K, warps, S, fused=False)) if vec else None
    return prog.launch(entry, (gemv_grid(N, K, S, warps), 1, 1), (32 * warps, 1, 1),
                       (out, x, w, _ptr(bias), rows, N, K, S), shared=shared, label=label or entry,
                       carveout=carveout)


def _fused_launch(prog: Program, entry: str, head: tuple, rows: int, N: int, K: int, eps: float | None,
                  label: str, split: int | None = None, takes_split: bool = True, preload: bool | int = True,
                  tail: tuple = ()) -> int:
    """Launch a fused entry with arguments (*head, rows, N, K[, split][, eps], *tail); the split is
    ``fused_split``'s unless the entry takes none (gemv_split's then)."""
    S = _split_arg(N, K, fused_split(N, K, rows, split) if takes_split else None)
    shared = launch_shared(rows, N, K, True, preload, split=S)
    if shared + STATIC_SMEM > SMEM_PER_BLOCK:
        if preload is True:  # preload_depth fell back to none: x alone is too big
            raise ValueError(f"{entry}: x of {rows} rows x K={K} needs {shared} bytes of shared memory, more than "
                             f"{SMEM_PER_BLOCK - STATIC_SMEM}; run the unfused op and gemv instead")
        raise ValueError(f"{entry}: x and a W preload of {preload} batches per warp need {shared} bytes of shared "
                         f"memory, more than {SMEM_PER_BLOCK - STATIC_SMEM}; give fewer batches")
    args = (*head, rows, N, K, *((S,) if takes_split else ()), *(() if eps is None else (float(eps),)), *tail)
    return prog.launch(entry, (fused_grid(N, K, rows, S), 1, 1), (32 * gemv_warps(N, K), 1, 1), args,
                       shared=shared, label=label or entry)


# gemv_rmsnorm_bf16_row's mode: bit 0 the SiLU pairs (norm + gate_up + SiLU), bit 1 signal the
# dependents after the wait (gemv.cu: both row GEMVs run one copy of code)
ROW_SILU, ROW_LATE = 1, 2


def gemv_rmsnorm(prog: Program, out: Arg, hidden_in: Arg, delta: Arg | None, hidden_out: Arg | None,
                 norm_w: Arg, w: Arg, bias: Arg | None, rows: int, N: int, K: int, eps: float,
                 out_f32: bool = False, label: str = "", split: int | None = None, lean: bool | None = None,
                 preload: bool | int = True, defer: int | bool | None = None) -> int:
    """out = rmsnorm(hidden_in + delta) @ w.T (+ bias), replacing add_rmsnorm + gemv.

    h = hidden_in + float(delta) in fp32; x = bf16(norm_w * bf16(h / sqrt(mean(h^2) + eps)))
    (add_rmsnorm's rounding); out[r, n] = sum_k x[r, k] * w[n, k] (+ bias[n]), rounded once.
    out: [rows, N] bf16, or f32 when ``out_f32`` (logits); written.
    hidden_in: [rows, K] f32 residual stream; read only.
    delta: [rows, K] bf16 branch output to add, or None.
    hidden_out: [rows, K] f32, or None; written with h (by one CTA).
    NOTE: hidden_out must not alias hidden_in (every CTA reads hidden_in while one writes
    hidden_out): ping-pong two residual buffers.
    norm_w: [K] bf16. w: [N, K] bf16. bias: [N] bf16 or None. rows: 1..8. eps: variance epsilon.
    split: the k split, None: ``fused_split``'s. preload: as ``gemv``'s (tests).
    defer: where the lean one-row entry applies, 1 its deferred-norm form ``gemv_rmsnorm_bf16_row_dn``
      (x = bf16(norm_w * h), out = (x @ w.T) / rms(h) (+ bias)), 2 that built warp by warp
      (``gemv_rmsnorm_bf16_row_dw``) where it fits; None: FIXEDGRAPH_NORM_DEFER (``norm_defer_mode``).
    Returns the op index.
    """
    rows, N, K = _check("gemv_rmsnorm", rows, N, K)
    if hidden_out is not None and hidden_out == hidden_in:
        raise ValueError("gemv_rmsnorm: hidden_out must not alias hidden_in; ping-pong two residual buffers")
    entry = "gemv_rmsnorm_bf16_f32out" if out_f32 else "gemv_rmsnorm_bf16"
    if not out_f32 and lean_enabled(lean) and row_path(rows, N, K, hidden_in, delta, hidden_out, norm_w, w):
        # "gemv_rmsnorm_bf16_row": the same results, a third of the code (lean_enabled); or its deferred-norm
        # forms "gemv_rmsnorm_bf16_row_dn" / "gemv_rmsnorm_bf16_row_dw" (norm_defer_mode)
        entry = _row_entry_for(N, K, rows, split, defer)
    head = (out, hidden_in, _ptr(delta), _ptr(hidden_out), norm_w, w, _ptr(bias))
    tail = (0,) if entry in ROW_ENTRIES else ()  # mode: bf16 out, signalling early
    return _fused_launch(prog, entry, head, rows, N, K, eps, label, split, preload=preload, tail=tail)


def gemv_rmsnorm_silu(prog: Program, out: Arg, hidden_in: Arg, delta: Arg | None, hidden_out: Arg | None,
                      norm_w: Arg, w: Arg, bias: Arg | None, rows: int, I: int, K: int, eps: float,
                      label: str = "", split: int | None = None, lean: bool | None = None,
                      preload: bool | int = True, defer: int | bool | None = None) -> int:
    """The MLP's activation straight from the residual stream, replacing add_rmsnorm + gate_up
    GEMV + silu_mul: gate_up = rmsnorm(hidden_in + delta) @ w.T (+ bias) (gemv_rmsnorm's
    rounding), out[r, j] = bf16(bf16(silu(gate_up[r, j])) * gate_up[r, I + j]) (silu_mul's).

    out: [rows, I] bf16; written. w: [2I, K] bf16, the gate rows then the up rows (the HF
    gate_proj / up_proj stacked); bias: [2I] bf16 or None. The rest as ``gemv_rmsnorm`` (``defer``:
    gate and up both scaled by 1 / rms before silu_mul).
    Each warp tile pairs 8 gate rows with their 8 up rows, so gate_up is never stored.
    Returns the op index.
    """
    rows, N, K = _check("gemv_rmsnorm_silu", rows, 2 * int(I), K)
    if hidden_out is not None and hidden_out == hidden_in:
        raise ValueError("gemv_rmsnorm_silu: hidden_out must not alias hidden_in; ping-pong two residual buffers")
    head = (out, hidden_in, _ptr(delta), _ptr(hidden_out), norm_w, w, _ptr(bias))
    if lean_enabled(lean) and row_path(rows, N, K, hidden_in, delta, hidden_out, norm_w, w):
        # the same results from norm + qkv's code (gemv.cu), signalling late: down_proj's launch
        # and its W copy then wait for this one's wait instead of landing during o_proj
        return _fused_launch(prog, _row_entry_for(N, K, rows, split, defer), head, rows, N, K, eps, label, split,
                             preload=preload,
                             tail=(ROW_SILU | ROW_LATE,))
    return _fused_launch(prog, "gemv_rmsnorm_silu_bf16", head, rows, N, K, eps, label, split, preload=preload)


def gemv_silu(prog: Program, out: Arg, gate_up: Arg, w: Arg, bias: Arg | None, rows: int, N: int, K: int,
              label: str = "", split: int | None = None) -> int:
    """out = (silu(gate) * up) @ w.T (+ bias), replacing silu_mul + gemv.

    x = bf16(bf16(silu(gate)) * up) (silu_mul's rounding), gate = gate_up[:, :K], up = gate_up[:, K:];
    out[r, n] = sum_k x[r, k] * w[n, k] (+ bias[n]), rounded once to bf16.
    out: [rows, N] bf16; written. gate_up: [rows, 2K] bf16. w: [N, K] bf16 (K = intermediate
    size). bias: [N] bf16 or None. rows: 1..8. Returns the op index.
    """
    rows, N, K = _check("gemv_silu", rows, N, K)
    return _fused_launch(prog, "gemv_silu_bf16", (out, gate_up, w, _ptr(bias)), rows, N, K, None, label, split)


def argmax_part_bytes(rows: int, N: int, K: int) -> int:
    """Bytes of gemv_rmsnorm_argmax's per-CTA partials: [grid, rows] (f32 value, i32 index)."""
    return fused_grid(N, K, rows) * rows * 8


def gemv_rmsnorm_argmax(prog: Program, logits: Arg, tokens: Arg, ring: Arg | None, step: Arg | None,
                        ring_len: int, part: Arg, counter: Arg, hidden_in: Arg, delta: Arg | None,
                        hidden_out: Arg | None, norm_w: Arg, w: Arg, bias: Arg | None, rows: int, N: int, K: int,
                        eps: float, label: str = "") -> int:
    """Greedy head in one launch: logits = rmsnorm(hidden_in + delta) @ w.T (+ bias) as
    ``gemv_rmsnorm(..., out_f32=True)``, and tokens[r] = argmax(logits[r]) as ``argmax_rows``
    (ties to the lowest index, NaN below every number), also written to
    ring[(step[0] % ring_len) * rows + r] when a ring is given.

    logits: [rows, N] f32, written. tokens: [rows] i32, written.
    ring: [ring_len, rows] i32 (a HostPtr to host-mapped memory) or None; step: [1] u32 or None.
    part: scratch of ``argmax_part_bytes(rows, N, K)`` bytes. counter: [1] u32 that must be 0
    before the first launch; every complete launch leaves it 0 again. Launches sharing one
    counter must not overlap (one stream).
    Needs K % 8 == 0 (the kernel's 16-byte path); otherwise use gemv_rmsnorm + argmax_rows.
    """
    rows, N, K = _check("gemv_rmsnorm_argmax", rows, N, K)
    if K % 8:
        raise ValueError(f"gemv_rmsnorm_argmax needs K % 8 == 0, got K={K}; "
                         "run gemv_rmsnorm(out_f32=True) and argmax_rows instead")
    if ring is not None and ring_len < 1:
        raise ValueError(f"gemv_rmsnorm_argmax with a token ring needs ring_len >= 1, got {ring_len}")
    if hidden_out is not None and hidden_out == hidden_in:
        raise ValueError("gemv_rmsnorm_argmax: hidden_out must not alias hidden_in; ping-pong two residual buffers")
    head = (logits, tokens, _ptr(ring), _ptr(step), int(ring_len) if ring is not None else 0, part, counter,
            hidden_in, _ptr(delta), _ptr(hidden_out), norm_w, w, _ptr(bias))
    # the kernel always takes gemv_split's k split (the grid here assumes the same)
    return _fused_launch(prog, "gemv_rmsnorm_argmax", head, rows, N, K, eps, label, None, takes_split=False)

"""GEMV/GEMM twins against a float64 formula, the launchers, and a numpy emulation of the
kernels' index math (mma fragments, ldmatrix addressing, swizzle, work split) that cannot
otherwise be checked without a GPU."""
import numpy as np
import pytest

from fixedgraph import bf16
from fixedgraph.backends.reference.memory import RefMemory
from fixedgraph.backends.reference.twins import gemm as gemm_twins
from fixedgraph.backends.reference.twins import gemv as gemv_twins
from fixedgraph.ops.gemm import gemm, gemm_grid, gemm_tile
from fixedgraph.backends.reference.twins import embed_norm as norm_twins
from fixedgraph.ops.gemv import (SMEM_PER_BLOCK, STATIC_SMEM, fused_grid, fused_shared, gemv, gemv_grid,
                                 gemv_rmsnorm, gemv_rmsnorm_silu, gemv_silu, gemv_split, gemv_warps, launch_shared, preload_shared,
                                 fused_rounds, fused_split, preload_depth,
                                 xs_stride)
from fixedgraph.ops.linear import linear
from fixedgraph.program import Null, Program, Ref

TWINS = {
    ("gemv", False): gemv_twins.gemv_bf16, ("gemv", True): gemv_twins.gemv_bf16_f32out,
    ("gemm", False): gemm_twins.gemm_bf16, ("gemm", True): gemm_twins.gemm_bf16_f32out,
}


def _put(mem, arr):
    addr = mem.alloc(arr.nbytes)
    mem.write(addr, arr)
    return addr


@pytest.mark.parametrize("kind,rows,N,K", [("gemv", 1, 576, 576), ("gemv", 5, 100, 1003), ("gemv", 8, 3, 7),
                                           ("gemm", 9, 1000, 1003), ("gemm", 130, 64, 576)])
@pytest.mark.parametrize("out_f32", [False, True])
@pytest.mark.parametrize("with_bias", [False, True])
def test_twin_matches_float64(kind, rows, N, K, out_f32, with_bias, rng):
    x = bf16.from_f32(rng.standard_normal((rows, K)))  # [rows, K] bf16
    w = bf16.from_f32(rng.standard_normal((N, K)) / np.sqrt(K))  # [N, K] bf16
    b = bf16.from_f32(rng.standard_normal(N))  # [N] bf16
    mem = RefMemory()
    out = mem.alloc(rows * N * 4)
    mem.memset(out, 0xFF, rows * N * 4)  # NaN poison
    extra = (0,) if kind == "gemv" else ()  # gemv's split argument (0: the kernel's default)
    TWINS[kind, out_f32](mem, (1, 1, 1), (256, 1, 1), out, _put(mem, x), _put(mem, w),
                         _put(mem, b) if with_bias else 0, rows, N, K, *extra)
    want = bf16.to_f32(x).astype(np.float64) @ bf16.to_f32(w).astype(np.float64).T
    if with_bias:
        want += bf16.to_f32(b)
    if out_f32:
        got = mem.view(out, np.float32, rows * N).reshape(rows, N)
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    else:
        got = bf16.to_f32(mem.view(out, np.uint16, rows * N)).reshape(rows, N)
        np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
        assert np.array_equal(got, bf16.round_f32(got))  # stored values are bf16


def test_twin_rejects_a_block_the_kernel_cannot_run():
    with pytest.raises(ValueError, match="block"):
        gemv_twins.gemv_bf16(RefMemory(), (1, 1, 1), (128, 1, 1), 0, 0, 0, 0, 1, 1, 1, 0)


def test_launchers_and_linear_dispatch():
    p = Program("t")
    linear(p, Ref("o"), Ref("x"), Ref("w"), None, 8, 576, 576)
    linear(p, Ref("o"), Ref("x"), Ref("w"), Ref("b"), 9, 576, 576, out_f32=True, label="lm")
    gemv(p, Ref("o"), Ref("x"), Ref("w"), Ref("b"), 1, 49152, 576, out_f32=True)
    a, b, c = p.launches
    assert (a.entry, a.block, a.args[3], a.args[4:]) == ("gemv_bf16_vec", (256, 1, 1), Null(),
                                                                (8, 576, 576, gemv_split(576, 576)))
    assert (b.entry, b.label, b.args[3], b.shared) == ("gemm_bf16_f32out", "lm", Ref("b"), 0)
    assert c.entry == "gemv_bf16_f32out" and c.grid == (gemv_grid(49152, 576), 1, 1)
    # the plain entries preload their first 8-block batch: 8 KiB per warp
    assert c.shared == preload_shared(49152, 576, fused=False) == 8 * 2 * 8 * 32 * 16
    with pytest.raises(ValueError, match="rows"):
        gemv(p, Ref("o"), Ref("x"), Ref("w"), None, 9, 10, 10)


def test_every_gemv_entry_has_cases():
    from tests.kernel_cases import load_all

    rng = np.random.default_rng(0)
    entries = {l.entry for n, f in load_all().items() if n.startswith("gemv_") for l in f(rng).program.launches}
    assert {"gemv_bf16", "gemv_bf16_vec", "gemv_bf16_f32out", "gemv_rmsnorm_bf16", "gemv_rmsnorm_bf16_row",
            "gemv_rmsnorm_bf16_f32out", "gemv_rmsnorm_silu_bf16", "gemv_silu_bf16",
            "gemv_rmsnorm_argmax"} <= entries


def test_lean_entries_take_the_launches_they_fit(monkeypatch):
    # The decode chain's lean forms (a third of the code) where the 16-byte body and, for the
    # fused ones, the one-row register RMSNorm apply; the generic entries elsewhere, and
    # everywhere with FIXEDGRAPH_GEMV_LEAN=0.
    p = Program("t")
    gemv(p, Ref("o"), Ref("x"), Ref("w"), None, 3, 1024, 2048)
    gemv(p, Ref("o"), Ref("x", 2), Ref("w"), None, 3, 1024, 2048)  # x 2 bytes off 16
    gemv(p, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, 1003)  # K % 8 != 0
    gemv_rmsnorm(p, Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None, 1, 4096, 1024, 1e-6)
    gemv_rmsnorm(p, Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None, 2, 4096, 1024, 1e-6)
    gemv_rmsnorm_silu(p, Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None, 1, 3072, 1024, 1e-6)
    gemv_rmsnorm_silu(p, Ref("o"), Ref("h0"), Ref("d", 4), Ref("h1"), Ref("nw"), Ref("w"), None, 1, 3072, 1024, 1e-6)
    assert [l.entry for l in p.launches] == [
        "gemv_bf16_vec", "gemv_bf16", "gemv_bf16", "gemv_rmsnorm_bf16_row", "gemv_rmsnorm_bf16",
        "gemv_rmsnorm_bf16_row", "gemv_rmsnorm_silu_bf16"]
    assert p.launches[0].args == p.launches[1].args[:1] + (Ref("x"),) + p.launches[1].args[2:]
    monkeypatch.setenv("FIXEDGRAPH_GEMV_LEAN", "0")
    q = Program("q")
    gemv(q, Ref("o"), Ref("x"), Ref("w"), None, 3, 1024, 2048)
    gemv_rmsnorm(q, Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None, 1, 4096, 1024, 1e-6)
    assert [l.entry for l in q.launches] == ["gemv_bf16", "gemv_rmsnorm_bf16"]
    assert gemv(q, Ref("o"), Ref("x"), Ref("w"), None, 3, 1024, 2048, lean=True) == 2 and q.launches[2].entry == "gemv_bf16_vec"
    with pytest.raises(ValueError):
        gemm(p, Ref("o"), Ref("x"), Ref("w"), None, 0, 10, 10)


# ---- numpy emulation of the kernels' index math ---------------------------------------------

def _mma(a_regs, b_regs):
    """m16n8k16 as the PTX ISA defines its fragments: a_regs [32 lanes][4 regs][2 halves],
    b_regs [32][2][2] -> D [16, 8] = A @ B."""
    A, B = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = divmod(lane, 4)
        for h in range(2):
            A[g, 2 * t + h], A[g + 8, 2 * t + h] = a_regs[lane][0][h], a_regs[lane][1][h]
            A[g, 2 * t + 8 + h], A[g + 8, 2 * t + 8 + h] = a_regs[lane][2][h], a_regs[lane][3][h]
            B[2 * t + h, g], B[2 * t + 8 + h, g] = b_regs[lane][0][h], b_regs[lane][1][h]
    return A @ B


def test_gemv_fragment_k_permutation(rng):
    """A lane's 16-byte loads of W rows g, g+8 and x row g, split into the two mmas as gemv.cu
    does, give the exact 16-column x 8-row x 32-k product."""
    W, x = rng.standard_normal((16, 32)), rng.standard_normal((8, 32))
    D = np.zeros((16, 8))
    for s in range(2):  # the two mmas of a k32 block take halves 4s .. 4s+3 of each chunk
        a_regs, b_regs = [], []
        for lane in range(32):
            g, t = divmod(lane, 4)
            w0, w1, xv = (v[8 * t + 4 * s: 8 * t + 4 * s + 4] for v in (W[g], W[g + 8], x[g]))
            a_regs.append([w0[0:2], w1[0:2], w0[2:4], w1[2:4]])
            b_regs.append([xv[0:2], xv[2:4]])
        D += _mma(a_regs, b_regs)
    np.testing.assert_allclose(D, W @ x.T, rtol=1e-12, atol=1e-12)


def _swz(row, chunk):  # gemm.cu swz(): byte offset of 16-byte chunk `chunk` of tile row `row`
    return row * 64 + ((chunk ^ ((row >> 1) & 3)) << 4)


def _ldmatrix_x4(smem, addrs):
    """smem: bf16 values indexed by byte offset // 2; addrs[lane] = row address given by lane."""
    regs = [[None] * 4 for _ in range(32)]
    for i in range(4):
        rows = [smem[addrs[8 * i + j] // 2: addrs[8 * i + j] // 2 + 8] for j in range(8)]
        for lane in range(32):
            regs[lane][i] = rows[lane // 4][2 * (lane % 4): 2 * (lane % 4) + 2]
    return regs


@pytest.mark.parametrize("BM,BN", [(128, 128), (64, 64)])
def test_gemm_swizzled_ldmatrix_fragments(BM, BN, rng):
    """Tiles stored with swz(), read back with gemm.cu's ldmatrix lane addresses, give every
    warp's exact tile product; and each 8-address phase of an ldmatrix hits 8 bank groups."""
    WM, WN = BM // 2, BN // 4
    A, Bt = rng.standard_normal((BM, 32)), rng.standard_normal((BN, 32))
    sa, sb = np.zeros(BM * 32), np.zeros(BN * 32)
    for tile, sm in ((A, sa), (Bt, sb)):
        for r in range(tile.shape[0]):
            for c in range(4):
                sm[_swz(r, c) // 2: _swz(r, c) // 2 + 8] = tile[r, 8 * c: 8 * c + 8]
    for warp in range(8):
        wm, wn = divmod(warp, 4)
        acc = np.zeros((WM, WN))
        for kk in range(2):
            af = []
            for i in range(WM // 16):
                addrs = [_swz(wm * WM + i * 16 + (l & 15), kk * 2 + (l >> 4)) for l in range(32)]
                af.append(_ldmatrix_x4(sa, addrs))
                assert all(len({(addrs[8 * q + j] // 16) % 8 for j in range(8)}) == 8 for q in range(4))
            bfr = []
            for j in range(0, WN // 8, 2):
                addrs = [_swz(wn * WN + j * 8 + ((l >> 4) << 3) + (l & 7), kk * 2 + ((l >> 3) & 1)) for l in range(32)]
                r = _ldmatrix_x4(sb, addrs)
                assert all(len({(addrs[8 * q + j2] // 16) % 8 for j2 in range(8)}) == 8 for q in range(4))
                bfr += [[lr[0], lr[1]] for lr in r], [[lr[2], lr[3]] for lr in r]
            for i, a_regs in enumerate(af):
                for j, b_regs in enumerate(bfr):
                    acc[16 * i: 16 * i + 16, 8 * j: 8 * j + 8] += _mma(a_regs, b_regs)
        want = A[wm * WM: (wm + 1) * WM] @ Bt[wn * WN: (wn + 1) * WN].T
        np.testing.assert_allclose(acc, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("N,K", [(576, 576), (3, 1003), (49152, 576), (4096, 4096), (100, 72), (17, 31),
                                 (1024, 2048), (1024, 3072)])
@pytest.mark.parametrize("grid_cut", [None, 3])
def test_gemv_work_split_covers_every_tile_and_k_block_once(N, K, grid_cut):
    """gemv.cu's loops (grid-stride groups, warp slot/k-slice, unrolled k32 blocks), for the
    block size the launcher picks (8 or 16 warps) and both batch sizes (16-byte / scalar path)."""
    warps = gemv_warps(N, K)
    S, tiles, kblocks = gemv_split(N, K, warps), -(-N // 16), -(-K // 32)
    per_block = warps // S
    groups = -(-tiles // per_block)
    grid = grid_cut or gemv_grid(N, K)
    for unroll in (8, 4, 1):
        seen = np.zeros((tiles, kblocks), dtype=int)
        for bx in range(grid):
            for grp in range(bx, groups, grid):
                for warp in range(warps):
                    tile, ks = grp * per_block + warp // S, warp % S
                    for kb in range(ks, kblocks, S * unroll):
                        for u in range(unroll):
                            if tile < tiles and kb + u * S < kblocks:
                                seen[tile, kb + u * S] += 1
        assert (seen == 1).all()


def test_block_size_choice():
    """Small-N long-K layers (0.6B o_proj, down) take 16 warps; the rest 8."""
    assert gemv_warps(1024, 2048) == 16 and gemv_warps(1024, 3072) == 16
    assert gemv_warps(4096, 1024) == 8 and gemv_warps(4096, 4096) == 8 and gemv_warps(100, 72) == 8


def test_shared_x_rows_are_bank_conflict_free():
    """One 8-lane phase of the x ld.shared.v4 reads rows g, g+1 at k 8t (t = 0..3): the two
    64-byte runs must fall in different halves of the 32 4-byte banks, for every K."""
    for K in (7, 72, 1000, 1003, 1024, 3072, 12288):
        stride = xs_stride(K)
        assert stride % 8 == 0 and stride >= -(-K // 32) * 32
        for g in range(0, 8, 2):
            banks = {((g + d) * stride * 2 + 16 * t) // 4 % 32 + i for d in (0, 1) for t in range(4) for i in range(4)}
            assert len(banks) == 32


@pytest.mark.parametrize("rows,N,K", [(1, 4096, 1024), (8, 151936, 4096), (8, 4096, 12288), (3, 100, 1003)])
def test_fused_grid_and_shared(rows, N, K):
    grid = fused_grid(N, K, rows)
    groups = -(-(-(-N // 16)) // (gemv_warps(N, K) // gemv_split(N, K, gemv_warps(N, K))))
    rounds = -(-groups // grid)
    assert 1 <= grid <= groups and -(-groups // rounds) == grid  # balanced: equal rounds per CTA
    assert grid <= 132 * 3
    assert fused_shared(rows, K) == rows * xs_stride(K) * 2
    shared = launch_shared(rows, N, K, True)  # x, plus the W preload area when it fits
    assert shared in (fused_shared(rows, K), fused_shared(rows, K) + preload_shared(N, K))
    assert shared + STATIC_SMEM <= SMEM_PER_BLOCK
    assert (shared > fused_shared(rows, K)) == (rows * K < 8 * 12288)  # the 8-row down_proj of 8B has no room


def test_fused_launchers():
    p = Program("t")
    gemv_rmsnorm(p, Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None, 2, 4096, 1024, 1e-6)
    gemv_rmsnorm(p, Ref("o"), Ref("h0"), None, None, Ref("nw"), Ref("w"), Ref("b"), 1, 151936, 1024, 1e-5,
                 out_f32=True, label="lm")
    gemv_silu(p, Ref("o"), Ref("gu"), Ref("w"), None, 8, 1024, 3072)
    a, b, c = p.launches
    assert (a.entry, a.args[2:4], a.args[6:], a.shared) == (
        "gemv_rmsnorm_bf16", (Ref("d"), Ref("h1")), (Null(), 2, 4096, 1024, gemv_split(4096, 1024), 1e-6),
        2 * 2 * xs_stride(1024) + preload_shared(4096, 1024))
    assert (b.entry, b.label, b.args[2:4], b.grid) == ("gemv_rmsnorm_bf16_f32out", "lm", (Null(), Null()),
                                                      (fused_grid(151936, 1024, 1), 1, 1))
    assert (c.entry, c.block, c.args[3:]) == ("gemv_silu_bf16", (512, 1, 1),
                                                         (Null(), 8, 1024, 3072, gemv_split(1024, 3072, 16)))
    with pytest.raises(ValueError, match="alias"):
        gemv_rmsnorm(p, Ref("o"), Ref("h0"), None, Ref("h0"), Ref("nw"), Ref("w"), None, 1, 64, 64, 1e-6)
    with pytest.raises(ValueError, match="rows"):
        gemv_silu(p, Ref("o"), Ref("gu"), Ref("w"), None, 9, 64, 64)
    with pytest.raises(ValueError, match="shared memory"):
        gemv_silu(p, Ref("o"), Ref("gu"), Ref("w"), None, 8, 64, 16000)


@pytest.mark.parametrize("with_delta", [False, True])
def test_fused_rmsnorm_twin_equals_add_rmsnorm_then_gemv(with_delta, rng):
    """The fused twin is bit-identical to the two ops it replaces (add_rmsnorm, then gemv)."""
    rows, N, K = 3, 40, 1000
    h = rng.standard_normal((rows, K)).astype(np.float32)
    d, nw = bf16.from_f32(rng.standard_normal((rows, K))), bf16.from_f32(1 + rng.standard_normal(K) / 5)
    w = bf16.from_f32(rng.standard_normal((N, K)) / np.sqrt(K))
    mem = RefMemory()
    a_h, a_d, a_nw, a_w = (_put(mem, v) for v in (h, d, nw, w))
    fused_out, h_out, x, two_out = (mem.alloc(rows * max(N, K) * 4) for _ in range(4))
    gemv_twins.gemv_rmsnorm_bf16(mem, (1, 1, 1), (256, 1, 1), fused_out, a_h, a_d if with_delta else 0, h_out,
                                 a_nw, a_w, 0, rows, N, K, 0, 1e-6)
    norm_twins.add_rmsnorm(mem, (rows, 1, 1), (256, 1, 1), a_h, a_d if with_delta else 0, a_nw, x, K, 1e-6)
    gemv_twins.gemv_bf16(mem, (1, 1, 1), (256, 1, 1), two_out, x, a_w, 0, rows, N, K, 0)
    assert np.array_equal(mem.view(fused_out, np.uint16, rows * N), mem.view(two_out, np.uint16, rows * N))
    assert np.array_equal(mem.view(h_out, np.float32, rows * K), mem.view(a_h, np.float32, rows * K))


@pytest.mark.parametrize("M,N", [(9, 576), (512, 2048), (1100, 4100), (4096, 4096), (8192, 576)])
def test_gemm_tile_order_covers_every_tile_once(M, N):
    """gemm.cu's grouped raster: tile index -> (tile row, tile column) is a bijection."""
    tile = gemm_tile(M, N)
    tm_n, tn_n = -(-M // tile), -(-N // tile)
    assert gemm_grid(M, N) == tm_n * tn_n
    seen = set()
    for t in range(tm_n * tn_n):
        per_group = 8 * tn_n
        first_m = t // per_group * 8
        rows = min(tm_n - first_m, 8)
        seen.add((first_m + (t % per_group) % rows, (t % per_group) // rows))
    assert seen == {(i, j) for i in range(tm_n) for j in range(tn_n)}


FUSED_SPLIT_ARG = 10  # out, hidden_in, delta, hidden_out, norm_w, w, bias, rows, N, K, split, eps[, mode]


def _launch_of(fn, *args, **kw):
    p = Program("t")
    fn(p, *args, **kw)
    return p.launches[0]


def test_preload_depth_whole_share_where_it_fits():
    """Each warp preloads its whole share when that keeps the CTAs per SM the launch can use,
    else one batch: 8B's and 0.6B's default launches keep one; Qwen3-1.7B's qkv (2 batches,
    256 CTAs: 2 per SM) takes both."""
    assert preload_depth(1, 4096, 1024) == 1 and preload_depth(1, 6144, 4096) == 1  # 0.6B / 8B qkv
    assert preload_depth(1, 4096, 4096, fused=False) == 1  # 8B o_proj: 2 batches need 2 CTAs of 137 KiB
    assert preload_depth(1, 4096, 2048) == 2  # 1.7B qkv
    assert preload_depth(1, 4096, 1024, split=4) == 2 and preload_depth(1, 4096, 1024, split=1) == 1
    assert preload_depth(8, 4096, 12288) == 0  # x of 8 rows x 12288 leaves no room
    assert launch_shared(1, 4096, 1024, True, split=4) == fused_shared(1, 1024) + preload_shared(4096, 1024, depth=2)


def test_fused_split_knob(monkeypatch):
    """FIXEDGRAPH_GEMV_FUSED_SPLIT: 0 keeps gemv_split; -1 (auto) takes the smallest split whose
    whole share is preloaded at 3 CTAs per SM, only where the default share is one batch."""
    args = (Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None)
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "0")
    a = _launch_of(gemv_rmsnorm, *args, 1, 4096, 1024, 1e-6)
    assert (a.grid, a.args[FUSED_SPLIT_ARG]) == ((256, 1, 1), 8)
    assert a.shared == fused_shared(1, 1024) + preload_shared(4096, 1024)
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "-1")
    for N, grid in ((4096, 128), (6144, 192)):  # 0.6B qkv, gate_up (+ SiLU: I = N / 2)
        for launch in (_launch_of(gemv_rmsnorm, *args, 1, N, 1024, 1e-6),
                       _launch_of(gemv_rmsnorm_silu, *args, 1, N // 2, 1024, 1e-6)):
            assert (launch.grid, launch.args[FUSED_SPLIT_ARG]) == ((grid, 1, 1), 4)
            assert launch.shared == fused_shared(1, 1024) + preload_shared(N, 1024, depth=2)
            assert 3 * (launch.shared + STATIC_SMEM + 1024) <= 228 * 1024
    assert fused_split(6144, 4096, 1) == gemv_split(6144, 4096)  # 8B qkv: a share of 8 batches, unchanged
    assert fused_split(4096, 1024, 8) == gemv_split(4096, 1024)  # 8 rows of x leave no room for 2 batches
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "2")
    assert _launch_of(gemv_rmsnorm, *args, 1, 4096, 1024, 1e-6).args[FUSED_SPLIT_ARG] == 2
    # an explicit split wins
    assert _launch_of(gemv_rmsnorm, *args, 1, 4096, 1024, 1e-6, split=8).args[FUSED_SPLIT_ARG] == 8


def test_fused_split_balances_multi_round_plans(monkeypatch):
    """Auto: where the default split leaves more column groups than CTAs fit at once (Llama-3-8B's
    gate_up: 448 groups at split 2, two each on 224 CTAs), the launch takes the finest groups
    (split 8: 1792 groups, five each on 359 CTAs); one-round plans keep their split."""
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "-1")
    assert fused_rounds(28672, 4096, 1, gemv_split(28672, 4096)) == 2
    a = _launch_of(gemv_rmsnorm_silu, Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None, 1,
                   14336, 4096, 1e-5)
    assert (a.grid, a.args[FUSED_SPLIT_ARG]) == ((359, 1, 1), 8)
    for N, K in ((24576, 4096), (6144, 4096), (4096, 1024), (6144, 1024)):  # Qwen3-8B / 0.6B: one round
        S = fused_split(N, K, 1)
        assert fused_rounds(N, K, 1, S) == 1 and S <= gemv_split(N, K)
    # streaming one-round plans that leave slots empty fill them: Qwen2.5-7B's gate_up (259 MB) at
    # split 1 is 296 CTAs of 396 slots; at split 4, 395
    assert gemv_split(37888, 3584) == 1 and fused_grid(37888, 3584, 1, 1) == 296
    assert fused_split(37888, 3584, 1) == 4 and fused_grid(37888, 3584, 1, 4) == 395
    # ... but only for more CTAs: Qwen3-4B's gate_up has 304 at splits 2, 4 and 8 and keeps 2
    assert {fused_grid(19456, 2560, 1, S) for S in (2, 4, 8)} == {304} and fused_split(19456, 2560, 1) == 2
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "0")  # the knob's 0 still means gemv_split's
    assert fused_split(28672, 4096, 1) == gemv_split(28672, 4096)


def test_narrow_knob(monkeypatch):
    """FIXEDGRAPH_GEMV_NARROW=1: 0.6B o_proj / down_proj as 64 CTAs of 256 threads, each warp's
    whole share preloaded (1 / 2 batches); launches of 256 threads already are unchanged."""
    monkeypatch.setenv("FIXEDGRAPH_GEMV_NARROW", "1")
    for K, depth in ((2048, 1), (3072, 2)):
        a = _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, K)
        assert (a.grid, a.block, a.args[-1], a.shared) == ((64, 1, 1), (256, 1, 1), 8,
                                                            preload_shared(1024, K, False, depth, warps=8))
    a = _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 4096, 4096)  # 8B o_proj
    assert (a.grid, a.block, a.shared) == ((256, 1, 1), (256, 1, 1), preload_shared(4096, 4096, False))
    monkeypatch.setenv("FIXEDGRAPH_GEMV_NARROW", "0")
    assert _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, 3072).block == (512, 1, 1)
    with pytest.raises(ValueError, match="preload"):
        _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, 3072, preload=4)


def test_narrow_auto_default(monkeypatch):
    """The default ("auto"): 256 threads unless 512 turn a warp's several batches into one. 0.6B
    o_proj (K 2048: one batch at 256) stays narrow; down_proj (K 3072: two batches at 256, one at
    512) goes wide with its one batch preloaded; a K whose share stays several batches at 512
    (Llama-3.2-1B's down_proj, 2048 x 8192) stays narrow, as do launches gemv_warps gives 256."""
    monkeypatch.delenv("FIXEDGRAPH_GEMV_NARROW", raising=False)
    a = _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, 2048)
    assert (a.grid, a.block) == ((64, 1, 1), (256, 1, 1))
    a = _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, 3072)
    assert (a.grid, a.block, a.args[-1], a.shared) == ((64, 1, 1), (512, 1, 1), 16,
                                                        preload_shared(1024, 3072, False, 1, warps=16))
    assert _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 2048, 8192).block == (256, 1, 1)
    assert _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 4096, 12288).block == (256, 1, 1)
    monkeypatch.setenv("FIXEDGRAPH_GEMV_NARROW", "yes")
    with pytest.raises(ValueError, match="FIXEDGRAPH_GEMV_NARROW='yes'"):
        _launch_of(gemv, Ref("o"), Ref("x"), Ref("w"), None, 1, 1024, 3072)


def test_fused_split_knob_rejects_garbage(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "auto")
    with pytest.raises(ValueError, match="FIXEDGRAPH_GEMV_FUSED_SPLIT='auto' is not an integer"):
        fused_split(4096, 1024, 1)
    monkeypatch.setenv("FIXEDGRAPH_GEMV_FUSED_SPLIT", "3")
    with pytest.raises(ValueError, match="FIXEDGRAPH_GEMV_FUSED_SPLIT=3 is not a power of two"):
        fused_split(4096, 1024, 1)
    p = Program("t")
    with pytest.raises(ValueError, match="preload of 9 batches"):
        gemv_rmsnorm(p, Ref("o"), Ref("h0"), None, None, Ref("nw"), Ref("w"), None, 1, 4096, 1024, 1e-6, split=8,
                     preload=9)


def _norm_gemv_launches(more: bool = False, **kw):
    """Qwen3-0.6B's norm + qkv and norm + gate_up + SiLU on one row, then norm + qkv on two rows;
    ``more``: also a one-row f32-out norm GEMV and 8B's norm + gate_up (K 4096, split 2). kw: the
    launchers' lean / defer."""
    from fixedgraph.ops.gemv import gemv_rmsnorm, gemv_rmsnorm_silu

    p = Program("p")
    args = (Ref("o"), Ref("h0"), Ref("d"), Ref("h1"), Ref("nw"), Ref("w"), None)
    gemv_rmsnorm(p, *args, 1, 4096, 1024, 1e-6, **kw)
    gemv_rmsnorm_silu(p, *args, 1, 3072, 1024, 1e-6, **kw)
    gemv_rmsnorm(p, *args, 2, 4096, 1024, 1e-6, **kw)
    if more:
        gemv_rmsnorm(p, Ref("o"), Ref("h0"), None, None, Ref("nw"), Ref("w"), None, 1, 4096, 1024, 1e-6, out_f32=True,
                     **kw)
        gemv_rmsnorm_silu(p, *args, 1, 12288, 4096, 1e-6, **kw)
    return p.launches


def test_row_gemvs_share_one_entry():
    """Norm + qkv and norm + gate_up + SiLU on one row both take gemv_rmsnorm_bf16_row (one copy of
    code, gemv.cu) with the generic entries' arguments plus the mode: 0 (bf16 out, signal early)
    and ROW_SILU | ROW_LATE; launches the row path does not fit keep the generic entries."""
    from fixedgraph.ops.gemv import ROW_LATE, ROW_SILU

    row, generic = _norm_gemv_launches(lean=True), _norm_gemv_launches(lean=False)
    assert [l.entry for l in row] == ["gemv_rmsnorm_bf16_row"] * 2 + ["gemv_rmsnorm_bf16"]
    assert [l.entry for l in generic] == ["gemv_rmsnorm_bf16", "gemv_rmsnorm_silu_bf16", "gemv_rmsnorm_bf16"]
    for a, b, mode in zip(row[:2], generic[:2], (0, ROW_SILU | ROW_LATE)):
        assert a.args == b.args + (mode,) and (a.grid, a.block, a.shared) == (b.grid, b.block, b.shared)
    assert row[2] == generic[2]


def test_norm_defer_knob_takes_the_deferred_row_entries(monkeypatch):
    """FIXEDGRAPH_NORM_DEFER=1: the one-row norm GEMVs take gemv_rmsnorm_bf16_row_dn with the row
    entry's arguments, mode, grid and shared memory; =2: gemv_rmsnorm_bf16_row_dw where a warp's k
    slice is at most 8 k32 blocks (Qwen3-0.6B's K = 1024 at split 4), _dn where not (8B's gate_up,
    K = 4096 at split 2); launches off the row path (two rows, f32 out) keep the generic entries;
    defer= overrides the knob; other values are refused."""
    from fixedgraph.ops.gemv import ROW_LATE, ROW_SILU

    def launches(defer=None):
        return _norm_gemv_launches(more=True, defer=defer)

    monkeypatch.delenv("FIXEDGRAPH_NORM_DEFER", raising=False)
    plain = launches()
    assert [l.entry for l in plain][:2] == ["gemv_rmsnorm_bf16_row"] * 2
    generic = ["gemv_rmsnorm_bf16", "gemv_rmsnorm_bf16_f32out"]
    for mode, first, wide in (("1", "gemv_rmsnorm_bf16_row_dn", "gemv_rmsnorm_bf16_row_dn"),
                              ("2", "gemv_rmsnorm_bf16_row_dw", "gemv_rmsnorm_bf16_row_dn")):
        monkeypatch.setenv("FIXEDGRAPH_NORM_DEFER", mode)
        got = launches()
        assert [l.entry for l in got] == [first] * 2 + generic + [wide]
        assert [l.args[-1] for l in got[:2]] == [0, ROW_SILU | ROW_LATE]
        for a, b in zip(got, plain):
            assert (a.args, a.grid, a.block, a.shared) == (b.args, b.grid, b.block, b.shared)
    assert plain[1].args[-3] == 4 and plain[4].args[-3] == 2  # the splits the choice rests on
    assert [l.entry for l in launches(defer=0)][:2] == ["gemv_rmsnorm_bf16_row"] * 2
    assert [l.entry for l in launches(defer=True)][:2] == ["gemv_rmsnorm_bf16_row_dn"] * 2
    monkeypatch.setenv("FIXEDGRAPH_NORM_DEFER", "yes")
    with pytest.raises(ValueError, match="FIXEDGRAPH_NORM_DEFER='yes'"):
        launches()
    with pytest.raises(ValueError, match="norm defer mode 3"):
        launches(defer=3)

"""Twins of ptx/src/runtime_test.cu."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins import twin


@twin("copy_f32")
def copy_f32(mem, grid, block, dst, src, n):
    mem.view(dst, np.float32, n)[:] = mem.view(src, np.float32, n)


@twin("axpy_f32")
def axpy_f32(mem, grid, block, y, x, a, n):
    yv = mem.view(y, np.float32, n)
    # fmaf: one rounding of a*x + y, which float64 then float32 reproduces exactly here.
    yv[:] = (np.float64(np.float32(a)) * mem.view(x, np.float32, n) + yv).astype(np.float32)


@twin("reduce_rows_f64")
def reduce_rows_f64(mem, grid, block, out, x, n):
    rows = grid[0]
    data = mem.view(x, np.float32, rows * n).reshape(rows, n).astype(np.float64)
    mem.view(out, np.float64, rows)[:] = data.sum(axis=1)


@twin("scalars_probe")
def scalars_probe(mem, grid, block, out, a, b, c, d, e, f):
    mem.view(out, np.float64, 6)[:] = [a, b, c, d, e, f]


@twin("store_u32")
def store_u32(mem, grid, block, out, value):
    mem.view(out, np.uint32, 1)[0] = value


@twin("record_meta")
def record_meta(mem, grid, block, log, meta, n):
    idx, value = (int(v) for v in mem.view(meta, np.uint32, 2))
    if idx < n:
        mem.view(log, np.uint32, n)[idx] = value


@twin("noop")
def noop(mem, grid, block):
    pass


def read_sums(words: np.ndarray, grid: int, block: int) -> np.ndarray:
    """read_probe's sum[b]: the xor of the u32 words of the 16-byte words w with
    (w // block) % grid == b (``words``: the source as u32, a whole number of 16-byte words)."""
    w16 = np.bitwise_xor.reduce(words.reshape(-1, 4), axis=1)
    owner = (np.arange(w16.size) // block) % grid
    out = np.zeros(grid, np.uint32)
    np.bitwise_xor.at(out, owner, w16)
    return out


@twin("read_probe")
@twin("read_probe_early")
def read_probe(mem, grid, block, src, sum_, n16):
    mem.view(sum_, np.uint32, grid[0])[:] = read_sums(mem.view(src, np.uint32, 4 * n16), grid[0], block[0])


def hand_words(xin: np.ndarray, ny16: int, mode: int) -> np.ndarray:
    """read_probe_hand's xout (u32, 4 a 16-byte word) from its xin (u32, 4 a word): word j is
    xin's word j % nx16, each u32 xor'ed with r, the xor of all of xin's u32 words (mode 1) or 0."""
    w = xin.reshape(-1, 4)
    r = np.bitwise_xor.reduce(xin, initial=np.uint32(0)) if mode == 1 else np.uint32(0)
    return (w[np.arange(ny16) % w.shape[0]] ^ np.uint32(r)).ravel()


@twin("read_probe_hand")
def read_probe_hand(mem, grid, block, src, sum_, n16, xin, xout, nx16, ny16, mode):
    if ny16 > grid[0] * block[0]:
        raise ValueError(f"read_probe_hand: {ny16} output words need at most gridDim * blockDim threads")
    read_probe(mem, grid, block, src, sum_, n16)
    x = mem.view(xin, np.uint32, 4 * nx16).copy()
    mem.view(xout, np.uint32, 4 * ny16)[:] = hand_words(x, ny16, mode)


@twin("cluster_probe")
def cluster_probe(mem, grid, block, out, *, cluster=(1, 1, 1)):
    (gx, gy, gz), (cx, cy, cz) = grid, cluster
    nblocks = gx * gy * gz
    z, y, x = (a.ravel() for a in np.indices((gz, gy, gx), dtype=np.uint32))  # flat block order: x fastest
    rank = x % cx + cx * (y % cy + cy * (z % cz))
    n = np.uint32(cx * cy * cz)
    o = mem.view(out, np.uint32, 2 * nblocks)
    o[:nblocks] = rank | (n << np.uint32(8))
    o[nblocks:] = (rank + 1) % n  # the neighbour's rank, read from its shared memory


@twin("stage_probe")
def stage_probe(mem, grid, block, src, ns, sum_, nbytes, chunk, issuers, mode):
    """The checksum of each CTA's staged bytes; no clock on the reference backend (times 0)."""
    G = grid[0]
    if nbytes % 16 or (mode == 0 and (chunk == 0 or chunk % 16 or -(-nbytes // chunk) > 64)):
        return
    if mode in (3, 4):  # 256-byte rows `chunk` bytes apart
        dstride = issuers or 256
        if nbytes % 256 or chunk < 256 or chunk % 16 or dstride < 256 or dstride % 16:
            return
        rows = nbytes // 256
        words = mem.view(src, np.uint32, G * rows * chunk // 4).reshape(G, rows, chunk // 4)[:, :, :64]
        words = words.reshape(G, -1)
    else:
        words = mem.view(src, np.uint32, G * nbytes // 4).reshape(G, nbytes // 4)
    mem.view(sum_, np.uint32, G)[:] = np.bitwise_xor.reduce(words, axis=1)
    mem.view(ns, np.uint64, 2 * G)[:] = 0


def chase_ends(next_of, ctas: int, hops: int) -> np.ndarray:
    """Where l2_hol_probe's CTA b ends: ``hops`` steps j = next_of[j] from j = 7 * b."""
    out = np.zeros(ctas, np.uint32)
    for b in range(ctas):
        j = 7 * b
        for _ in range(hops):
            j = int(next_of[j])
        out[b] = j
    return out


class _Table:
    """u32 entries of a device table read one at a time (the twin does not know its length)."""

    def __init__(self, mem, addr):
        self.mem, self.addr = mem, addr

    def __getitem__(self, j):
        return self.mem.view(self.addr + 4 * int(j), np.uint32, 1)[0]


@twin("l2_hol_probe")
def l2_hol_probe(mem, grid, block, src, chase, ns, last, inflight, hops, mode):
    """The chain's last index per CTA (each starts at 7 * b); no clock on the reference backend
    (times 0). The copies only land in shared memory, which nothing reads back."""
    G = grid[0]
    mem.view(ns, np.uint64, 3 * G)[:] = 0
    mem.view(last, np.uint32, G)[:] = chase_ends(_Table(mem, chase), G, hops)


def bcast_sums(words: np.ndarray, ctas: int, bytes_: int, reps: int, stride: int) -> np.ndarray:
    """bcast_probe's sum[b]: the xor of the u32 words of replica b % reps (``words``: vec as u32)."""
    n, step = bytes_ // 4, stride // 4
    per_rep = [np.bitwise_xor.reduce(words[r * step: r * step + n]) if n else np.uint32(0) for r in range(max(reps, 1))]
    return np.array([per_rep[b % max(reps, 1)] for b in range(ctas)], np.uint32)


@twin("bcast_probe")
def bcast_probe(mem, grid, block, vec, ns, sum_, bytes_, reps, stride):
    """Each CTA's xor of its replica; no clock on the reference backend (times 0)."""
    G = grid[0]
    words = mem.view(vec, np.uint32, ((max(reps, 1) - 1) * stride + bytes_) // 4)
    mem.view(sum_, np.uint32, G)[:] = bcast_sums(words, G, bytes_, reps, stride)
    mem.view(ns, np.uint64, 2 * G)[:] = 0


ICACHE_FMAS = {"icache_probe_2k": 128, "icache_probe_8k": 512, "icache_probe_32k": 2048, "icache_flush": 10240}  # the flush at its full 10 blocks


def fma_f32(x: np.ndarray, a: float, b: float) -> np.ndarray:
    """fma.rn.f32(x, a, b) bit for bit: x * a is exact in float64 (24 + 24 bits); the float64 sum
    is rounded to odd (its TwoSum error says which way the exact sum lies), and rounding that to
    float32 is then the exact sum's one rounding (53 >= 24 + 2 bits)."""
    p = x.astype(np.float64) * np.float64(np.float32(a))
    q = np.float64(np.float32(b))
    s = p + q
    bb = s - p
    e = (p - (s - bb)) + (q - bb)
    even = (s.view(np.uint64) & np.uint64(1)) == 0
    fix = (e != 0) & even & np.isfinite(s)
    s = np.where(fix, np.nextafter(s, np.where(e > 0, np.inf, -np.inf)), s)
    return s.astype(np.float32)


def icache_sums(threads: int, fmas: int, a: float, b: float) -> np.ndarray:
    """What thread t of an icache probe (or icache_flush) writes, for t < ``threads``: 8
    accumulators acc[i] = a * (8t + i), ``fmas`` fma.rn.f32 acc = acc * a + b round-robin over
    them, then their float32 sum in order. Bit-exact."""
    af = np.float32(a)
    acc = af * (8 * np.arange(threads, dtype=np.uint32)[:, None] + np.arange(8, dtype=np.uint32)).astype(np.float32)
    for i in range(fmas // 8):
        acc = fma_f32(acc, a, b)
    for i in range(fmas % 8):
        acc[:, i] = fma_f32(acc[:, i], a, b)
    s = acc[:, 0].copy()
    for i in range(1, 8):
        s = s + acc[:, i]
    return s


def _icache(mem, grid, block, out, a, b, fmas):
    G, T = grid[0], block[0]
    mem.view(out, np.float32, G * T)[:] = np.tile(icache_sums(T, fmas, a, b), G)


def _icache_probe_twin(entry: str):
    def probe(mem, grid, block, ns, out, a, b):
        """Each thread's sum; no clock on the reference backend (times 0)."""
        _icache(mem, grid, block, out, a, b, ICACHE_FMAS[entry])
        mem.view(ns, np.uint64, 2 * grid[0])[:] = 0

    probe.__name__ = probe.__qualname__ = entry
    return twin(entry)(probe)


icache_probe_2k = _icache_probe_twin("icache_probe_2k")
icache_probe_8k = _icache_probe_twin("icache_probe_8k")
icache_probe_32k = _icache_probe_twin("icache_probe_32k")


@twin("icache_flush")
def icache_flush(mem, grid, block, out, a, b, blocks):
    """Each thread's sum after 1024 * min(blocks, 10) FMAs (the flush's code is what matters on
    the GPU, not its result)."""
    _icache(mem, grid, block, out, a, b, 1024 * min(int(blocks), 10))


def handoff_chain(x: np.ndarray, launches: int) -> np.ndarray:
    """What ``launches`` handoff_probe grids of a chain leave in the last one's out, starting from
    ``x`` (each: out[i] = in[(i + 1) % n] + 1, in float32)."""
    y = x.astype(np.float32)
    for _ in range(launches):
        y = np.roll(y, -1) + np.float32(1.0)
    return y


@twin("handoff_probe")
def handoff_probe(mem, grid, block, in_, out, n, counter, flag_in, flag_out, step, bump, ns):
    """The chain's data and flags (launches run one after another here: every flag is already set
    when read; one that is not names a broken chain); no clock (times 0)."""
    G = grid[0]
    st = mem.view(step, np.uint32, 1)
    if bump:
        st[0] += np.uint32(1)
        return
    epoch = st[0]
    if flag_in and mem.view(flag_in, np.uint32, 1)[0] != epoch:
        raise RuntimeError(f"handoff_probe: flag_in holds {mem.view(flag_in, np.uint32, 1)[0]}, not this step's "
                           f"epoch {epoch}: its producer did not publish (no flag_out, or no bump before the chain)")
    m = min(n, G * block[0])
    src = mem.view(in_, np.float32, n).copy()
    mem.view(out, np.float32, n)[:m] = (np.roll(src, -1) + np.float32(1.0))[:m]
    if flag_out:
        if mem.view(counter, np.uint32, 1)[0] != 0:
            raise RuntimeError("handoff_probe: the arrival counter is not 0 at rest")
        mem.view(flag_out, np.uint32, 1)[0] = epoch
    mem.view(ns, np.uint64, 3 * G)[:] = 0


def persist_gemv(W: np.ndarray, x: np.ndarray) -> np.ndarray:
    """persist_probe's one op, bit for bit: W [N, K] and x [K] (bf16 values as float32) -> the
    bf16 bits of each row's dot product, summed as the kernel does (lane l's j-th 16-byte unit,
    k = 8 (l + 32 j) + e for e = 0..7, goes by fma into chain j % 4; a bf16 product is exact in
    float32, so numpy's product then sum rounds once as fma does; the lane's sum (c0 + c1) +
    (c2 + c3); then the lanes' shfl_xor tree)."""
    N, K = W.shape
    iters = -(-(K // 8) // 32)
    Wp = np.zeros((N, iters * 256), np.float32)
    Wp[:, :K] = W
    xp = np.zeros(iters * 256, np.float32)
    xp[:K] = x
    Wp = Wp.reshape(N, iters, 32, 8)
    xp = xp.reshape(iters, 32, 8)
    acc = np.zeros((4, N, 32), np.float32)
    for j in range(iters):
        for e in range(8):
            acc[j % 4] = acc[j % 4] + Wp[:, j, :, e] * xp[j, :, e]
    lane = (acc[0] + acc[1]) + (acc[2] + acc[3])
    lanes = np.arange(32)
    for o in (16, 8, 4, 2, 1):
        lane = lane + lane[:, lanes ^ o]
    return bf16.from_f32(lane[:, 0])


def persist_ops(shapes, k0: int) -> tuple[np.ndarray, int, int]:
    """persist_probe's op table for a chain of (N, K) GEMVs, op j reading the first K of op j - 1's
    output (op 0: act[0:k0]); each op's W follows the last's, each output at a 16-byte aligned
    offset. -> (table [nops, 5] u32, W bytes, act elements)."""
    rows, w16, prev, end = [], 0, 0, -(-k0 // 8) * 8
    for N, K in shapes:
        rows.append((N, K, w16, prev, end))
        w16 += N * K * 2 // 16
        prev, end = end, end + -(-N // 8) * 8
    return np.array(rows, np.uint32).reshape(-1, 5), 16 * w16, end


@twin("persist_probe")
def persist_probe(mem, grid, block, w, act, ops, nops, cnt, step, marks, ns, slot, kmax, flag, ll):
    """Every op in order (the counters' handover is what makes the GPU's order this one); the
    counters and flags end one epoch on (flags only under handover (``flag & 3``) 1-2; under 3 the
    outputs' LL words carry the epoch instead; ``flag & 4``, chunks two at a time, sums the same; ``flag & 16`` (no
    weight stream) leaves garbage on the GPU, and the formula's outputs here; ``flag & 32``, quiet
    handovers, and ``flag & 64``, evict-first weight copies, sum the same); no clock (times 0). A counter not at (epoch - 1) * G, a flag
    not at epoch - 1 or an LL word already of this epoch at launch would hang or race on the GPU,
    so it is an error here."""
    G = grid[0]
    table = mem.view(ops, np.uint32, 5 * nops).reshape(nops, 5).astype(np.int64)
    if (slot % 16 or block[0] % 32 or block[0] < 64 or any(K % 8 or 2 * K > slot or K > kmax for K in table[:, 1])):
        return
    epoch = int(mem.view(step, np.uint32, 1)[0])
    words = mem.view(cnt, np.uint32, 2 * nops).reshape(nops, 2)
    counters, flags = words[:, 0], words[:, 1]
    flag &= 3
    if flag == 3:
        n_ll = int(max(int(o) + int(N) for N, _, _, _, o in table)) if nops else 0
        if np.any((mem.view(ll, np.uint64, n_ll) >> np.uint64(32)) == np.uint64(epoch)):
            raise RuntimeError(f"persist_probe: LL words already carry epoch {epoch} at launch (bump *step first)")
    elif nops and not (np.all(counters == np.uint32((epoch - 1) * G)) and (not flag or np.all(flags == epoch - 1))):
        raise RuntimeError(f"persist_probe: counters / flags {words[:2].tolist()}... are not ((epoch - 1) * G, epoch - "
                           f"1) = ({(epoch - 1) * G}, {epoch - 1}) at launch (zero them with *step = 1, or bump *step "
                           "before each launch)")
    for N, K, w16, i, o in table:
        W = bf16.to_f32(mem.view(w + 16 * int(w16), np.uint16, int(N) * int(K))).reshape(int(N), int(K))
        x = bf16.to_f32(mem.view(act + 2 * int(i), np.uint16, int(K)))
        y = persist_gemv(W, x)
        mem.view(act + 2 * int(o), np.uint16, int(N))[:] = y
        if flag == 3:
            mem.view(ll + 8 * int(o), np.uint64, int(N))[:] = np.uint64(epoch) << np.uint64(32) | y.astype(np.uint64)
    if flag != 3:
        counters += np.uint32(G)
    if flag in (1, 2):
        flags[:] = epoch
    if marks:
        mem.view(marks, np.uint64, 8 * nops * G)[:] = 0
    mem.view(ns, np.uint64, 2 * G)[:] = 0

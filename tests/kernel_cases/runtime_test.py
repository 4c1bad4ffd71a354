"""Cases for the runtime's own test kernels (ptx/src/runtime_test.cu)."""
import functools
import operator

import numpy as np

from fixedgraph import bf16
from fixedgraph.backends.reference.twins.runtime_test import (ICACHE_FMAS, bcast_sums, chase_ends, handoff_chain,
                                                               icache_sums, persist_gemv, persist_ops)
from fixedgraph.program import Null, Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison


@kernel_case("copy_f32")
def copy_case(rng):
    n = int(rng.integers(1, 300_000))
    p = Program("copy")
    p.launch("copy_f32", (min(1024, (n + 255) // 256),), (256,), [Ref("dst"), Ref("src"), n])
    src = Buffer(rng.standard_normal(n).astype(np.float32), "f32")
    return KernelCase("copy_f32", p, {"src": src, "dst": poison(n, "f32")}, {"dst": Check()},
                      reference=lambda v: {"dst": v["src"]})


@kernel_case("axpy_f32")
def axpy_case(rng):
    n = int(rng.integers(1, 100_000))
    a = float(np.float32(rng.standard_normal()))
    p = Program("axpy")
    p.launch("axpy_f32", (37,), (128,), [Ref("y"), Ref("x"), a, n])  # a grid that does not divide n
    x = Buffer(rng.standard_normal(n).astype(np.float32), "f32")
    y = Buffer(rng.standard_normal(n).astype(np.float32), "f32")
    return KernelCase("axpy_f32", p, {"x": x, "y": y}, {"y": Check(atol=1e-6, rtol=1e-6)},
                      reference=lambda v: {"y": a * v["x"].astype(np.float64) + v["y"]})


@kernel_case("reduce_rows_f64")
def reduce_case(rng):
    rows, n = int(rng.integers(1, 40)), int(rng.integers(1, 5000))
    p = Program("reduce")
    p.launch("reduce_rows_f64", (rows,), (256,), [Ref("out"), Ref("x"), n])
    x = Buffer(rng.standard_normal((rows, n)).astype(np.float32), "f32")
    return KernelCase("reduce_rows_f64", p, {"x": x, "out": poison(rows, "f64")}, {"out": Check(rtol=1e-12, atol=1e-9)},
                      reference=lambda v: {"out": v["x"].astype(np.float64).sum(axis=1)})


@kernel_case("scalars_probe")
def scalars_case(rng):
    vals = [int(rng.integers(0, 256)), int(rng.integers(-32768, 32768)), float(np.float32(rng.standard_normal())),
            int(rng.integers(-(1 << 62), 1 << 62)), int(rng.integers(0, 1 << 32)), float(rng.standard_normal())]
    p = Program("scalars")
    p.launch("scalars_probe", (1,), (32,), [Ref("out"), *vals])
    expected = np.array([vals[0], vals[1], vals[2], float(vals[3]), vals[4], vals[5]], dtype=np.float64)
    return KernelCase("scalars_probe", p, {"out": poison(6, "f64")}, {"out": Check()},
                      reference=lambda v: {"out": expected})


@kernel_case("cluster_probe")
def cluster_case(rng):
    cluster = tuple(int(c) for c in rng.choice([(2, 1, 1), (1, 2, 1), (1, 1, 4), (2, 2, 2), (4, 1, 2), (8, 1, 1)]))
    grid = tuple(c * int(rng.integers(1, 4)) for c in cluster)
    nblocks = grid[0] * grid[1] * grid[2]
    p = Program("cluster")
    p.launch("cluster_probe", grid, (int(rng.choice([32, 64, 128])),), [Ref("out")], cluster=cluster)

    def reference(v):
        ranks = []
        for bz in range(grid[2]):  # block order of the kernel's flat index: x fastest
            for by in range(grid[1]):
                for bx in range(grid[0]):
                    cx, cy, cz = bx % cluster[0], by % cluster[1], bz % cluster[2]
                    ranks.append(cx + cy * cluster[0] + cz * cluster[0] * cluster[1])
        n = cluster[0] * cluster[1] * cluster[2]
        return {"out": np.array([r + (n << 8) for r in ranks] + [(r + 1) % n for r in ranks], dtype=np.uint32)}

    return KernelCase("cluster_probe", p, {"out": poison(2 * nblocks, "u32")}, {"out": Check()},
                      reference=reference, notes=f"grid {grid} cluster {cluster}")


def probe_sums(src, n16, G, T):
    """A read probe's sum[b]: the xor of CTA b's words, those of its blockDim-long runs (every G-th
    run) of the n16 16-byte words of src (u32)."""
    words = src.astype(np.uint32).reshape(n16, 4)
    runs = np.arange(n16) // T
    return np.array([np.bitwise_xor.reduce(words[runs % G == b].ravel(), initial=0) for b in range(G)], np.uint32)


def read_probe_case(rng, entry):
    # every CTA xor-reduces the 16-byte words it streams, whatever the grid, block and length (a
    # tail that fills part of a round of in-flight loads included)
    G, T = int(rng.integers(1, 9)), int(rng.choice([32, 128, 256, 512]))
    n16 = int(rng.integers(1, 40_000))
    p = Program(entry)
    for _ in range(2):  # two chained launches: the early entry's store after its wait
        p.launch(entry, (G,), (T,), [Ref("src"), Ref("sum"), n16])
    src = Buffer(rng.integers(0, 1 << 32, size=4 * n16, dtype=np.uint64).astype(np.uint32), "u32")

    def reference(v):
        return {"sum": probe_sums(v["src"], n16, G, T)}

    return KernelCase(entry, p, {"src": src, "sum": poison(G, "u32")}, {"sum": Check()}, reference=reference,
                      notes=f"G {G} block {T} words {n16}")


@kernel_case("read_probe")
def read_probe_late_case(rng):
    return read_probe_case(rng, "read_probe")


@kernel_case("read_probe_early")
def read_probe_early_case(rng):
    return read_probe_case(rng, "read_probe_early")


@kernel_case("read_probe_hand")
def read_probe_hand_case(rng):
    # a chain of three handovers: each launch streams its own source before its wait, then takes
    # the vector the launch before it left (x0 -> x1 -> x2 -> x3, of differing lengths) and leaves
    # one, as a copy (mode 0) or xor'ed with the xor of everything it read (mode 1, the norm's
    # reduction); the last launch's sums are what `sum` holds
    G, T = int(rng.integers(1, 9)), int(rng.choice([32, 128, 256, 512]))
    lens = [int(rng.integers(1, 700)) for _ in range(4)]
    lens = [min(n, G * T) for n in lens]  # a launch leaves at most one 16-byte word a thread
    modes = [int(rng.integers(0, 2)) for _ in range(3)]
    n16 = [int(rng.integers(1, 20_000)) for _ in range(3)]
    p = Program("read_probe_hand")
    for i in range(3):
        p.launch("read_probe_hand", (G,), (T,), [Ref(f"src{i}"), Ref("sum"), n16[i], Ref(f"x{i}"), Ref(f"x{i + 1}"),
                                                 lens[i], lens[i + 1], modes[i]])
    bufs = {f"src{i}": Buffer(rng.integers(0, 1 << 32, size=4 * n16[i], dtype=np.uint64).astype(np.uint32), "u32")
            for i in range(3)}
    bufs["x0"] = Buffer(rng.integers(0, 1 << 32, size=4 * lens[0], dtype=np.uint64).astype(np.uint32), "u32")
    bufs.update({f"x{i}": poison(4 * lens[i], "u32") for i in (1, 2, 3)})
    bufs["sum"] = poison(G, "u32")

    def reference(v):
        xs = [[int(w) for w in v["x0"].astype(np.uint32)]]
        for i in range(3):  # word by word, independently of the twin
            r = functools.reduce(operator.xor, xs[-1], 0) if modes[i] else 0
            xs.append([xs[-1][4 * (j % lens[i]) + e] ^ r for j in range(lens[i + 1]) for e in range(4)])
        xs = [np.array(x, np.uint32) for x in xs]
        return {"x1": xs[1], "x2": xs[2], "x3": xs[3], "sum": probe_sums(v["src2"], n16[2], G, T)}

    return KernelCase("read_probe_hand", p, bufs, {k: Check() for k in ("x1", "x2", "x3", "sum")}, reference=reference,
                      notes=f"G {G} block {T} lengths {lens} modes {modes}")


@kernel_case("stage_probe")
def stage_probe_case(rng):
    # every staging method brings each CTA's slice into shared memory: the xor of its words
    # (modes 3-4: 256-byte rows `chunk` bytes apart, as the attention's K/V rows in the pools)
    G = int(rng.integers(1, 9))
    mode = int(rng.integers(0, 5))
    rowwise = mode in (3, 4)
    chunk = int(rng.choice([4096, 16384])) if mode == 0 else int(rng.choice([256, 2048, 2064])) if rowwise else 0
    if rowwise:
        nbytes = 256 * int(rng.integers(1, 64))
        src_bytes = G * nbytes // 256 * chunk
    else:
        nbytes = 16 * int(rng.integers(1, (chunk * 64 if mode == 0 else 65536) // 16 // 4))
        src_bytes = G * nbytes
    issuers = int(rng.choice([0, 256, 272])) if rowwise else int(rng.choice([1, 4, 32]))  # rowwise: row stride
    shared = nbytes // 256 * (issuers or 256) if rowwise else nbytes
    p = Program("stage_probe")
    p.launch("stage_probe", (G,), (int(rng.choice([128, 256, 384])),),
             [Ref("src"), Ref("ns"), Ref("sum"), nbytes, chunk, issuers, mode], shared=shared)
    src = Buffer(rng.integers(0, 1 << 32, size=src_bytes // 4, dtype=np.uint64).astype(np.uint32), "u32")

    def reference(v):
        w = v["src"].reshape(G, -1)
        if rowwise:
            w = w.reshape(G, nbytes // 256, chunk // 4)[:, :, :64].reshape(G, -1)
        return {"sum": np.bitwise_xor.reduce(w, axis=1)}

    return KernelCase("stage_probe", p, {"src": src, "ns": poison(3 * G, "u64"), "sum": poison(G, "u32")},
                      {"sum": Check()}, reference=reference, notes=f"mode {mode} chunk {chunk} bytes {nbytes}")


@kernel_case("l2_hol_probe")
def l2_hol_probe_case(rng):
    # every CTA follows the chase table `hops` times from index 7 * b, whatever copies it has in flight
    G, hops, mode = int(rng.integers(1, 9)), int(rng.integers(0, 12)), int(rng.integers(0, 2))
    n = 2048
    inflight = 16 * int(rng.integers(0, 4096))
    perm = rng.permutation(n).astype(np.uint32)
    chase = np.empty(n, np.uint32)
    chase[perm] = np.roll(perm, -1)

    p = Program("l2_hol_probe")
    p.launch("l2_hol_probe", (G,), (int(rng.choice([64, 256])),), [Ref("src"), Ref("chase"), Ref("ns"), Ref("last"), inflight, hops, mode],
             shared=max(inflight, 16))
    src = Buffer(rng.integers(0, 1 << 32, size=max(4, G * inflight // 4), dtype=np.uint64).astype(np.uint32), "u32")
    return KernelCase("l2_hol_probe", p, {"src": src, "chase": Buffer(chase, "u32"), "ns": poison(3 * G, "u64"),
                                            "last": poison(G, "u32")},
                      {"last": Check()},
                      reference=lambda v: {"last": chase_ends(v["chase"], G, hops)},
                      notes=f"G {G} hops {hops} mode {mode} inflight {inflight}")


@kernel_case("bcast_probe")
def bcast_probe_case(rng):
    # every CTA xor-reduces replica b % reps of the row, whatever the grid, block and stride
    G, reps = int(rng.integers(1, 9)), int(rng.integers(1, 5))
    nbytes = 16 * int(rng.integers(1, 600))
    stride = nbytes + 16 * int(rng.integers(0, 8))
    p = Program("bcast_probe")
    p.launch("bcast_probe", (G,), (int(rng.choice([32, 128, 256])),), [Ref("vec"), Ref("ns"), Ref("sum"), nbytes, reps, stride])
    vec = Buffer(rng.integers(0, 1 << 32, size=(reps * stride) // 4, dtype=np.uint64).astype(np.uint32), "u32")
    return KernelCase("bcast_probe", p, {"vec": vec, "ns": poison(2 * G, "u64"), "sum": poison(G, "u32")},
                      {"sum": Check()},
                      reference=lambda v: {"sum": bcast_sums(v["vec"].astype(np.uint32), G, nbytes, reps, stride)},
                      notes=f"G {G} reps {reps} bytes {nbytes} stride {stride}")


def icache_case(entry: str):
    def case(rng):
        # every thread's 8 FMA chains and their sum, bit for bit (fma.rn.f32: one rounding each)
        G, T = int(rng.integers(1, 4)), int(rng.choice([32, 64]))
        a, b = float(np.float32(rng.uniform(0.5, 0.999))), float(np.float32(rng.standard_normal()))
        p = Program(entry)
        timed = entry != "icache_flush"
        blocks = int(rng.choice([0, 1, 3, 10, 11]))  # the flush's 1024-FMA blocks (10 at most run)
        fmas = ICACHE_FMAS[entry] if timed else 1024 * min(blocks, 10)
        p.launch(entry, (G,), (T,), ([Ref("ns")] if timed else []) + [Ref("out"), a, b] + ([] if timed else [blocks]))
        bufs = {"out": poison(G * T, "f32"), **({"ns": poison(2 * G, "u64")} if timed else {})}
        return KernelCase(entry, p, bufs, {"out": Check()},
                          reference=lambda v: {"out": np.tile(icache_sums(T, fmas, a, b), G)},
                          notes=f"G {G} T {T} a {a} b {b}" + ("" if timed else f" blocks {blocks}"))

    return case


for _entry in ICACHE_FMAS:
    kernel_case(_entry)(icache_case(_entry))


@kernel_case("handoff_probe")
def handoff_case(rng):
    # a chain as the bench builds it: bump the epoch, a PDL grid that publishes a flag, then flag
    # grids, each reading every element its predecessor wrote (out[i] = in[(i + 1) % n] + 1)
    G, T = int(rng.integers(1, 5)), int(rng.choice([32, 64, 128]))
    n, k = G * T, int(rng.integers(2, 5))  # k flag grids after the PDL one
    p = Program("handoff_probe")
    p.launch("handoff_probe", (1,), (32,), [Ref("a"), Ref("b"), n, Ref("cnt"), Null(), Null(), Ref("step"), 1, Ref("ns")])
    bufs = ["a", "b"]
    for j in range(k + 1):
        flag_in = Null() if j == 0 else Ref(f"flag{j - 1}")
        p.launch("handoff_probe", (G,), (T,), [Ref(bufs[j % 2]), Ref(bufs[(j + 1) % 2]), n, Ref("cnt"), flag_in,
                                                  Ref(f"flag{j}"), Ref("step"), 0, Ref("ns")])
    x = rng.standard_normal(n).astype(np.float32)
    last = bufs[(k + 1) % 2]
    buffers = {"a": Buffer(x, "f32"), "b": poison(n, "f32"), "cnt": Buffer(np.zeros(1, np.uint32), "u32"),
               "step": Buffer(np.array([int(rng.integers(0, 1000))], np.uint32), "u32"),
               "ns": poison(3 * G, "u64"), **{f"flag{j}": Buffer(np.zeros(1, np.uint32), "u32") for j in range(k + 1)}}
    return KernelCase("handoff_probe", p, buffers, {last: Check(), "cnt": Check()},
                      reference=lambda v: {last: handoff_chain(v["a"], k + 1), "cnt": np.zeros(1, np.uint32)},
                      notes=f"G {G} T {T} flag grids {k}")


@kernel_case("persist_probe")
def persist_probe_case(rng):
    # a chain of GEMVs in one launch, each op reading what the op before wrote, through a ring of
    # 1-4 stages (wraps, partial chunks, CTAs with no rows of an op); sometimes two launches with
    # the epoch bumped between them (the counters carry over)
    G, cw = int(rng.integers(1, 9)), int(rng.integers(1, 9))
    shapes, n_prev = [], None
    for _ in range(int(rng.integers(1, 6))):
        K = 8 * int(rng.integers(1, 64 if n_prev is None else n_prev // 8 + 1))
        N = int(rng.integers(8, 300))
        shapes.append((N, K))
        n_prev = N
    table, wbytes, n_act = persist_ops(shapes, shapes[0][1])
    kmax = max(K for _, K in shapes)
    slot = 16 * -(-2 * kmax * int(rng.integers(1, 4)) // 16) + 16 * int(rng.integers(0, 3))
    stages = int(rng.integers(1, 5))
    epoch, twice, flag = int(rng.integers(1, 4)), bool(rng.integers(0, 2)), int(rng.integers(0, 8)) | 32 * int(rng.integers(0, 4))  # | 4 pairs, | 32 quiet, | 64 evict-first
    p = Program("persist_probe")
    args = [Ref("w"), Ref("act"), Ref("ops"), len(shapes), Ref("cnt"), Ref("step"),
            Ref("marks") if rng.integers(0, 2) else Null(), Ref("ns"), slot, kmax, flag,
            Ref("ll") if flag & 3 == 3 else Null()]
    shared = 16 * -(-2 * kmax // 16) + stages * slot
    p.launch("persist_probe", (G,), (32 * (cw + 1),), args, shared=shared)
    if twice:
        p.launch("handoff_probe", (1,), (32,), [Null(), Null(), 0, Null(), Null(), Null(), Ref("step"), 1, Null()])
        p.launch("persist_probe", (G,), (32 * (cw + 1),), args, shared=shared)
    w32 = rng.standard_normal(wbytes // 2).astype(np.float32)
    for N, K, w16, _, _ in table.astype(np.int64):  # each op's outputs about as large as its inputs
        w32[8 * w16: 8 * w16 + N * K] /= np.sqrt(K)
    w = bf16.from_f32(w32)
    act = np.full(n_act, 0x7FC1, np.uint16)
    act[:shapes[0][1]] = bf16.from_f32(rng.standard_normal(shapes[0][1]).astype(np.float32))
    nops = len(shapes)

    def reference(v):
        a = v["act"].copy()
        words = v["ll"].copy()
        for (N, K, w16, i, o) in table.astype(np.int64):
            W = v["w"][8 * w16: 8 * w16 + N * K].reshape(N, K)
            y = bf16.to_f32(persist_gemv(W, a[i:i + K]))
            exact = W.astype(np.float64) @ a[i:i + K].astype(np.float64)  # the emulation is a GEMV
            assert np.allclose(y, exact, rtol=2.0 ** -7, atol=1e-4 * np.abs(exact).max()), "persist_gemv is off"
            a[o:o + N] = y
            if flag & 3 == 3:
                words[o:o + N] = np.uint64(epoch + twice) << np.uint64(32) | bf16.from_f32(y).astype(np.uint64)
        done = epoch + twice
        counters = ([(epoch - 1) * G, epoch - 1] if flag & 3 == 3 else [done * G, done if flag & 3 else epoch - 1])
        return {"act": a, "cnt": np.array([counters] * nops, np.uint32).reshape(-1), "ll": words}

    return KernelCase("persist_probe", p, {
        "w": Buffer(w, "bf16"), "act": Buffer(act, "bf16"), "ops": Buffer(table.reshape(-1), "u32"),
        "cnt": Buffer(np.array([[(epoch - 1) * G, epoch - 1]] * nops, np.uint32).reshape(-1), "u32"),
        "step": Buffer(np.array([epoch], np.uint32), "u32"),
        "marks": poison(8 * nops * G, "u64"), "ns": poison(2 * G, "u64"), "ll": poison(n_act, "u64")},
        {"act": Check(), "cnt": Check(), "ll": Check()}, reference=reference,
        notes=f"G {G} warps {cw}+1 shapes {shapes} slot {slot} stages {stages} epoch {epoch} twice {twice} flag {flag}")

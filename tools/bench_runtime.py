#!/usr/bin/env python3
"""Driver-runtime overheads on the GPU (issue: runtime core). Prints a table; --json writes it.

Measures: host µs per cuGraphLaunch (1/100/1000 noop nodes), GPU µs per graph node, host µs per
node patch (Cython path and the Python CudaGraph.patch path), eager launch µs through the Cython
loop vs the cuda.bindings Python API, the staging-copy launch path, copy bandwidth, and that the
replay path allocates no Python objects.
"""
from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import time
import tracemalloc

from fixedgraph.backends.cuda import CudaDevice
from fixedgraph.layout import ArenaPlan
from fixedgraph.profile import gpu_ms
from fixedgraph.program import Program, Ref, Staging


def noop_program(n: int) -> Program:
    p = Program(f"noop{n}")
    for _ in range(n):
        p.launch("noop", 1, 32, [])
    return p


def host_us_per_launch(fn, batch: int, trials: int, sync) -> float:
    """Median host time of one call, calls issued in batches small enough not to fill the queue."""
    per = []
    for _ in range(trials):
        sync()
        t0 = time.perf_counter()
        for _ in range(batch):
            fn()
        per.append((time.perf_counter() - t0) / batch * 1e6)
    sync()
    return statistics.median(per)


def gpu_us(dev: CudaDevice, fn, reps: int) -> float:
    return gpu_ms(dev, fn, reps) * 1e3


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--json", help="write results here")
    args = ap.parse_args()
    dev = CudaDevice(0)
    plan = ArenaPlan()
    plan.add("meta", (64,), "u32")
    plan.add("a", (1 << 28,), "f32")  # 1 GiB each, far beyond L2
    plan.add("b", (1 << 28,), "f32")
    arena = dev.arena(plan)
    dev.memset(arena.addr("a"), 0x3F, 4 << 28)
    res: dict[str, float | str] = {"device": dev.properties()["name"]}

    # graph launch host cost and GPU cost per node
    for n in (1, 100, 1000):
        g = dev.graph(dev.bind(noop_program(n), arena))
        batch = 20 if n == 1000 else 200
        res[f"graph_launch_host_us_{n}"] = host_us_per_launch(g.launch, batch, 30, dev.synchronize)
        res[f"graph_gpu_us_{n}"] = gpu_us(dev, g.launch, 50)
    res["gpu_us_per_node"] = (res["graph_gpu_us_1000"] - res["graph_gpu_us_1"]) / 999
    # the same 1000-node chain with plain edges (PDL off) for comparison
    dev.use_pdl = False
    g_plain = dev.graph(dev.bind(noop_program(1000), arena))
    dev.use_pdl = True
    res["graph_gpu_us_1000_no_pdl"] = gpu_us(dev, g_plain.launch, 50)
    res["programmatic_edges_1000"] = dev.graph(dev.bind(noop_program(1000), arena)).num_programmatic

    # node patching: Cython path (pre-packed args) and the Python CudaGraph.patch path
    g = dev.graph(dev.bind(noop_program(100), arena))
    exe = g.exe
    t0 = time.perf_counter()
    for _ in range(10000):
        exe.patch(50)
    res["patch_us_cython"] = (time.perf_counter() - t0) / 10000 * 1e6
    p = Program("axpy")
    p.launch("axpy_f32", 1, 32, [Ref("a"), Ref("b"), 1.0, 32])
    ga = dev.graph(dev.bind(p, arena))
    t0 = time.perf_counter()
    for i in range(2000):
        ga.patch(0, args=[Ref("a"), Ref("b"), float(i), 32])
    res["patch_us_python_repack"] = (time.perf_counter() - t0) / 2000 * 1e6

    # eager launches: Cython loop vs the Python bindings
    b1 = dev.bind(noop_program(1), arena)
    ops = b1.oplist
    reps = 2000
    dev.synchronize()
    t0 = time.perf_counter()
    ops.run_repeat(dev.stream, reps)
    res["eager_launch_host_us_cython"] = (time.perf_counter() - t0) / reps * 1e6
    dev.synchronize()
    try:
        from cuda.bindings import driver as pydrv

        f = pydrv.CUfunction(dev.function("runtime_test", "noop"))
        s = pydrv.CUstream(dev.stream)
        t0 = time.perf_counter()
        for _ in range(reps):
            pydrv.cuLaunchKernel(f, 1, 1, 1, 32, 1, 1, 0, s, 0, 0)
        res["eager_launch_host_us_python_bindings"] = (time.perf_counter() - t0) / reps * 1e6
    except Exception as exc:  # report, do not hide
        res["eager_launch_host_us_python_bindings"] = f"n/a: {exc}"
    dev.synchronize()

    # staging copy + launch (the decode hot path) vs plain launch of the same 100-node graph
    staging = dev.alloc_host(4096)
    sp2 = Program("staged")
    sp2.copy(Ref("meta"), Staging(0), 256)
    sp2.ops.extend(noop_program(99).ops)
    gs = dev.graph(dev.bind(sp2, arena, staging=staging))
    exe_s = gs.exe
    slot_addrs = [staging.host_addr + 256 * (k % 16) for k in range(16)]
    k = [0]

    def staged():
        exe_s.launch_staged(0, slot_addrs[k[0] & 15], dev.stream)
        k[0] += 1

    res["staged_launch_host_us_100"] = host_us_per_launch(staged, 200, 30, dev.synchronize)
    res["staged_gpu_us_100"] = gpu_us(dev, staged, 50)

    # the same, staging through a kernel that reads mapped host memory (what the model uses)
    sp3 = Program("staged_kernel")
    sp3.launch("stage_meta", 1, 256, [Ref("meta"), staging.device_addr, 64])
    sp3.ops.extend(noop_program(99).ops)
    gk = dev.graph(dev.bind(sp3, arena))
    exe_k = gk.exe
    mapped = [staging.device_addr + 256 * (i % 16) for i in range(16)]

    def staged_kernel():
        exe_k.launch_with_u64(0, 1, mapped[k[0] & 15], dev.stream)
        k[0] += 1

    res["staged_kernel_launch_host_us_100"] = host_us_per_launch(staged_kernel, 200, 30, dev.synchronize)
    res["staged_kernel_gpu_us_100"] = gpu_us(dev, staged_kernel, 50)

    # the decode path: stage_meta_ring picks the slot from a device counter, nothing is patched
    plan_c = ArenaPlan()
    plan_c.add("counter", (1,), "u32")
    plan_c.add("meta", (64,), "u32")
    arena_c = dev.arena(plan_c)
    arena_c.fill("counter", 0)
    sp4 = Program("staged_ring")
    sp4.launch("stage_meta_ring", 1, 256, [Ref("meta"), staging.device_addr, Ref("counter"), 64, 16, 64])
    sp4.ops.extend(noop_program(99).ops)
    gr = dev.graph(dev.bind(sp4, arena_c))
    res["staged_ring_launch_host_us_100"] = host_us_per_launch(gr.launch, 200, 30, dev.synchronize)
    res["staged_ring_gpu_us_100"] = gpu_us(dev, gr.launch, 50)

    # no Python allocations on the replay path
    gc.collect()
    tracemalloc.start()
    snap0 = tracemalloc.take_snapshot()
    blocks0 = sys.getallocatedblocks()
    for i in range(10000):
        staging.array[256 * (i & 15)] = i & 0xFF  # the host's per-step write
        gr.launch()
        if i % 500 == 499:
            dev.synchronize()
    dev.synchronize()
    blocks1 = sys.getallocatedblocks()
    snap1 = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in snap1.compare_to(snap0, "filename") if "bench_runtime" not in str(s.traceback))
    res["replay_10k_python_blocks_delta"] = blocks1 - blocks0
    res["replay_10k_tracemalloc_bytes_delta"] = grown

    # copy bandwidth (bytes read + written) with the grid-stride copy kernel
    n = 1 << 28
    cp = Program("copy")
    cp.launch("copy_f32", 132 * 16, 256, [Ref("b"), Ref("a"), n])
    gc_ = dev.graph(dev.bind(cp, arena))
    us = gpu_us(dev, gc_.launch, 20)
    res["copy_kernel_GBps"] = 2 * 4 * n / us / 1e3

    rows = [(k, v) for k, v in res.items()]
    width = max(len(k) for k, _ in rows)
    for k_, v in rows:
        print(f"{k_:<{width}}  {v:.3f}" if isinstance(v, float) else f"{k_:<{width}}  {v}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

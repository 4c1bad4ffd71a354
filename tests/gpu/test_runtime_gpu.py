"""The driver runtime on a real GPU: graphs, patching, staging copies, faults, errors."""
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from fixedgraph.errors import ArgumentError, CudaError, LaunchConfigError, PtxError
from fixedgraph.layout import ArenaPlan
from fixedgraph.program import Program, Ref, Staging


def arena(cuda, n=4096):
    plan = ArenaPlan()
    for name in ("x", "y", "z"):
        plan.add(name, (n,), "f32")
    plan.add("meta", (2,), "u32")
    plan.add("log", (512,), "u32")
    return cuda.arena(plan)


def graph_axpy_then_patch(cuda, bound, a, x, y):
    """Replay a program whose op 0 is y += 2x and whose last op copies y to z, check z, patch op 0
    to y -= x, replay and check again; returns the graph."""
    g = cuda.graph(bound)
    g.launch()
    cuda.synchronize()
    np.testing.assert_allclose(a.read("z"), 2 * x + y, rtol=1e-5, atol=1e-5)
    g.patch(0, args=[Ref("y"), Ref("x"), -1.0, 4096])
    g.launch()
    cuda.synchronize()
    np.testing.assert_allclose(a.read("z"), x + y, rtol=1e-5, atol=1e-5)
    return g


def test_patch_changes_next_replay_and_only_that_node(cuda, rng):
    a = arena(cuda)
    x, y = rng.standard_normal(4096).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
    a.write("x", x)
    a.write("y", y)
    p = Program("patch")
    p.launch("axpy_f32", 16, 256, [Ref("y"), Ref("x"), 2.0, 4096])
    p.launch("copy_f32", 16, 256, [Ref("z"), Ref("y"), 4096])
    bound = cuda.bind(p, a)
    g = graph_axpy_then_patch(cuda, bound, a, x, y)
    # node 1 was not patched: redirect it and check node 0 kept its patched value
    g.patch(1, args=[Ref("x"), Ref("y"), 4096])  # now copies y -> x
    g.launch()
    cuda.synchronize()
    np.testing.assert_allclose(a.read("x"), (x + y) - x, rtol=1e-4, atol=1e-5)
    cuda.run(bound)  # eager program is untouched by graph patches (a = 2, copy y -> z)
    cuda.synchronize()
    np.testing.assert_allclose(a.read("z"), a.read("y"), rtol=0)


def test_staging_delivers_per_launch_metadata_when_queued(cuda, rng):
    a = arena(cuda)
    a.fill("log", 0xFF)
    n = 256
    staging = cuda.alloc_host(8 * n)
    p = Program("stage")
    copy = p.copy(Ref("meta"), Staging(0), 8)
    p.launch("record_meta", 1, 32, [Ref("log"), Ref("meta"), 512])
    g = cuda.graph(cuda.bind(p, a, staging=staging))
    values = rng.integers(0, 1 << 31, size=n, dtype=np.uint32)
    slots = staging.view(np.uint32, 2 * n)
    for k in range(n):  # queue every launch before any sync: each must see its own slot
        slots[2 * k : 2 * k + 2] = (k, values[k])
        g.launch_staged(copy, staging.host_addr + 8 * k)
    cuda.synchronize()
    assert np.array_equal(a.read("log")[:n], values)


def test_mapped_host_memory_is_written_by_kernels(cuda, rng):
    a = arena(cuda)
    ring = cuda.alloc_host(4 * 512, mapped=True)
    ring.view(np.uint32)[:] = 0
    a.write("meta", np.array([7, 12345], dtype=np.uint32))
    p = Program("mapped")
    p.launch("record_meta", 1, 32, [ring.device_addr, Ref("meta"), 512])
    cuda.run(cuda.bind(p, a))
    cuda.synchronize()
    assert ring.view(np.uint32)[7] == 12345  # read from host memory, no copy call


def test_fault_in_checked_mode_names_launch(cuda):
    code = textwrap.dedent("""
        from fixedgraph.backends.cuda import CudaDevice
        from fixedgraph.backends.base import LaunchFault
        from fixedgraph.layout import ArenaPlan
        from fixedgraph.program import Program, Ref
        d = CudaDevice(0)
        plan = ArenaPlan(); plan.add("x", (64,), "f32"); plan.add("y", (64,), "f32")
        a = d.arena(plan)
        p = Program("fault")
        p.launch("copy_f32", 1, 64, [Ref("x"), Ref("y"), 64], label="fine")
        p.launch("store_u32", 1, 32, [0x10, 5], label="deliberate fault")
        try:
            d.run(d.bind(p, a), checked=True)
        except LaunchFault as e:
            print("FAULT:", e)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "FAULT: op 1 kernel store_u32 [deliberate fault]" in out.stdout, out.stdout + out.stderr
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in out.stdout


def test_bad_ptx_reports_jit_log(cuda):
    from fixedgraph import _driver

    bad = b".version 9.0\n.target sm_90\n.address_size 64\n.visible .entry k()\n{\n  bogus.instr %r1;\n}\n"
    with pytest.raises(CudaError) as info:
        _driver.module_load(bad)
    assert info.value.name.startswith("CUDA_ERROR_") and "bogus" in str(info.value)


def test_unknown_entry_and_wrong_args(cuda):
    a = arena(cuda)
    p = Program("bad")
    p.launch("not_a_kernel", 1, 1, [])
    with pytest.raises(PtxError, match="not_a_kernel"):
        cuda.bind(p, a)
    q = Program("badargs")
    q.launch("axpy_f32", 1, 1, [Ref("y"), Ref("x"), "2.0", 10])
    with pytest.raises(ArgumentError, match="axpy_f32.*#2"):
        cuda.bind(q, a)


def test_device_properties(cuda):
    props = cuda.properties()
    assert props["sm_count"] > 0 and props["total_memory"] > 0 and props["cc_major"] >= 7
    attrs = cuda.function_attributes("copy_f32")
    assert attrs["local_bytes"] == 0 and attrs["num_regs"] > 0


def test_programmatic_edges_keep_dependent_chains_correct(cuda, rng):
    """Every kernel waits on its predecessor, so a PDL chain computes what a plain one does."""
    a = arena(cuda, n=1 << 20)
    n = 1 << 20
    x = rng.standard_normal(n).astype(np.float32)
    a.write("x", x)
    a.write("y", np.zeros(n, np.float32) + 1)
    p = Program("pdl-chain")
    for _ in range(50):  # y <- y + x, then z <- y, then x <- z: each reads the previous output
        p.launch("axpy_f32", 264, 256, [Ref("y"), Ref("x"), 1.0, n])
        p.launch("copy_f32", 264, 256, [Ref("z"), Ref("y"), n])
    g = cuda.graph(cuda.bind(p, a))
    assert g.num_programmatic == g.num_nodes - 1 if cuda.use_pdl else g.num_programmatic == 0
    g.launch()
    cuda.synchronize()
    np.testing.assert_allclose(a.read("z"), 1 + 50 * x, rtol=1e-5, atol=1e-4)


def cluster_expected(grid, cluster) -> np.ndarray:
    """cluster_probe's output from the cluster rules: [ctarank | nctarank << 8 per block, then
    the next rank's value per block], blocks in flat order (x fastest)."""
    n = cluster[0] * cluster[1] * cluster[2]
    ranks = [bx % cluster[0] + cluster[0] * (by % cluster[1] + cluster[1] * (bz % cluster[2]))
             for bz in range(grid[2]) for by in range(grid[1]) for bx in range(grid[0])]
    return np.array([r | n << 8 for r in ranks] + [(r + 1) % n for r in ranks], dtype=np.uint32)


@pytest.mark.parametrize("grid, block, cluster", [((2, 1, 8), 32, (1, 1, 4)), ((1, 1, 32), 128, (1, 1, 16))],
                         ids=["portable-4", "non-portable-16"])
def test_cluster_launch_eager_graph_pdl_and_patch(cuda, grid, block, cluster):
    """A cluster node between two plain kernels, all PDL: the probe reads its rank, the cluster
    size and a neighbour CTA's shared memory; a patched cluster node keeps its cluster."""
    words = 2 * grid[0] * grid[1] * grid[2]
    plan = ArenaPlan()
    for name in ("zeros", "out", "copy", "alt"):
        plan.add(name, (words,), "u32")  # [2 * blocks] u32
    a = cuda.arena(plan)
    a.write("zeros", np.zeros(words, np.uint32))
    p = Program("cluster")
    p.launch("copy_f32", 1, 256, [Ref("out"), Ref("zeros"), words], label="clear out")
    p.launch("cluster_probe", grid, block, [Ref("out")], label="probe", cluster=cluster)
    p.launch("copy_f32", 1, 256, [Ref("copy"), Ref("out"), words], label="read out")
    expected = cluster_expected(grid, cluster)
    bound = cuda.bind(p, a)
    for name in ("out", "copy", "alt"):
        a.fill(name, 0xEE)
    cuda.run(bound, checked=True)
    cuda.synchronize()
    assert np.array_equal(a.read("out"), expected) and np.array_equal(a.read("copy"), expected)
    for name in ("out", "copy"):
        a.fill(name, 0xEE)
    g = cuda.graph(bound)
    assert g.num_programmatic == (2 if cuda.use_pdl else 0)  # into and out of the cluster node
    g.launch()
    cuda.synchronize()
    assert np.array_equal(a.read("out"), expected) and np.array_equal(a.read("copy"), expected)
    g.patch(1, args=[Ref("alt")])  # cuGraphExecKernelNodeSetParams on the cluster node
    g.launch()
    cuda.synchronize()
    assert np.array_equal(a.read("alt"), expected)
    assert not a.read("out").any() and not a.read("copy").any()  # cleared, and the probe moved


@pytest.mark.parametrize("carveout", [0, 100])
def test_carveout_launches_eager_graph_and_patch(cuda, rng, carveout):
    """Launches with a preferred carveout (cuLaunchKernelEx eager, a node attribute in the graph),
    one also in a cluster, between plain PDL launches: the same results, and a patched node runs."""
    a = arena(cuda)
    x, y = rng.standard_normal(4096).astype(np.float32), rng.standard_normal(4096).astype(np.float32)
    a.write("x", x)
    a.write("y", y)
    words = 2 * 4
    p = Program("carveout")
    p.launch("axpy_f32", 16, 256, [Ref("y"), Ref("x"), 2.0, 4096], carveout=carveout)
    p.launch("cluster_probe", (4, 1, 1), 32, [Ref("log")], label="probe", cluster=(4, 1, 1), carveout=carveout)
    p.launch("copy_f32", 16, 256, [Ref("z"), Ref("y"), 4096], carveout=carveout)
    bound = cuda.bind(p, a)
    cuda.run(bound, checked=True)
    cuda.synchronize()
    np.testing.assert_allclose(a.read("z"), 2 * x + y, rtol=1e-5, atol=1e-5)
    assert np.array_equal(a.read("log")[:words], cluster_expected((4, 1, 1), (4, 1, 1)))
    a.write("y", y)
    a.fill("z", 0)
    graph_axpy_then_patch(cuda, bound, a, x, y)


def test_cluster_limits(cuda):
    """16 CTAs of 1024 threads with nearly all shared memory still fit (one CTA per SM, opted in
    to non-portable sizes); 32 CTAs or a grid that does not divide are refused up front."""
    grid, cluster = (16, 1, 1), (16, 1, 1)
    plan = ArenaPlan()
    plan.add("out", (2 * 16,), "u32")  # [2 * blocks] u32
    a = cuda.arena(plan)
    shared = cuda.properties()["max_shared_per_block_optin"] - 1024  # leaves room for the static word
    p = Program("big-cluster")
    p.launch("cluster_probe", grid, 1024, [Ref("out")], shared=shared, label="probe", cluster=cluster)
    cuda.run(cuda.bind(p, a), checked=True)
    cuda.synchronize()
    assert np.array_equal(a.read("out"), cluster_expected(grid, cluster))
    with pytest.raises(LaunchConfigError, match="has 32 CTAs, more than the 16"):
        p.launch("cluster_probe", 32, 32, [Ref("out")], cluster=32)
    with pytest.raises(LaunchConfigError, match="not a multiple of cluster"):
        p.launch("cluster_probe", 12, 32, [Ref("out")], cluster=8)

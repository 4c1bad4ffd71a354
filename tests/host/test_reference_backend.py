"""Reference backend semantics: the contract the CUDA backend is tested against on the GPU."""
import numpy as np
import pytest

from fixedgraph.backends.base import LaunchFault
from fixedgraph.backends.reference import ReferenceDevice
from fixedgraph.backends.reference.memory import MemoryFault
from fixedgraph.backends.reference.twins import param_names
from fixedgraph.errors import ArgumentError, LaunchConfigError, PtxError
from fixedgraph.layout import ArenaPlan
from fixedgraph.program import Program, Ref, Staging


def setup(n=1000):
    dev = ReferenceDevice()
    plan = ArenaPlan()
    for name in ("x", "y", "z"):
        plan.add(name, (n,), "f32")
    plan.add("meta", (4,), "u32")
    return dev, dev.arena(plan)


def test_graph_replay_patch_and_isolation(rng):
    dev, arena = setup()
    x, y = rng.standard_normal(1000).astype(np.float32), rng.standard_normal(1000).astype(np.float32)
    arena.write("x", x)
    arena.write("y", y)
    p = Program("axpy2")
    p.launch("axpy_f32", 8, 128, [Ref("y"), Ref("x"), 2.0, 1000])
    p.launch("copy_f32", 8, 128, [Ref("z"), Ref("y"), 1000])
    bound = dev.bind(p, arena)
    g = dev.graph(bound)
    g.launch()
    np.testing.assert_allclose(arena.read("z"), 2 * x + y, rtol=1e-6)
    g.patch(0, args=[Ref("y"), Ref("x"), -1.0, 1000])  # only node 0 changes
    g.launch()
    np.testing.assert_allclose(arena.read("z"), x + y, rtol=1e-5, atol=1e-6)
    dev.run(bound)  # the eager program still has a=2: patching the graph left it alone
    np.testing.assert_allclose(arena.read("z"), 3 * x + y, rtol=1e-5, atol=1e-6)


def test_staging_copy_delivers_per_launch_values(rng):
    dev, arena = setup()
    staging = dev.alloc_host(64)
    p = Program("stage")
    p.copy(Ref("meta"), Staging(0), 16)
    g = dev.graph(dev.bind(p, arena, staging=staging))
    for step in range(3):
        vals = rng.integers(0, 1 << 32, size=4, dtype=np.uint32)
        staging.view(np.uint32, 4, offset=16 * (step % 2))[:] = vals
        g.launch_staged(0, staging.host_addr + 16 * (step % 2))
        assert np.array_equal(arena.read("meta"), vals)


def test_fault_names_op_and_kernel():
    dev, arena = setup()
    p = Program("bad")
    p.launch("copy_f32", 1, 32, [Ref("x"), Ref("y"), 10])
    p.launch("store_u32", 1, 32, [0x10, 5], label="deliberate fault")
    with pytest.raises(LaunchFault, match=r"op 1 kernel store_u32 \[deliberate fault\].*out=0x10"):
        dev.run(dev.bind(p, arena), checked=True)


def test_out_of_bounds_twin_access_faults():
    dev, arena = setup(n=10)
    p = Program("oob")
    p.launch("copy_f32", 1, 32, [Ref("x"), Ref("y"), 100_000])
    with pytest.raises(LaunchFault, match="outside every allocation"):
        dev.run(dev.bind(p, arena))


def test_unknown_entry_and_bad_args():
    dev, arena = setup()
    p = Program("unknown")
    p.launch("no_such_kernel", 1, 1, [])
    with pytest.raises(PtxError, match="no PTX entry named 'no_such_kernel'"):
        dev.bind(p, arena)
    q = Program("badarg")
    q.launch("copy_f32", 1, 1, [Ref("x"), Ref("nope"), 1])
    with pytest.raises(ArgumentError, match="copy_f32.*no arena region 'nope'"):
        dev.bind(q, arena)


def test_memory_bounds():
    dev = ReferenceDevice()
    a = dev.alloc(100)
    with pytest.raises(MemoryFault):
        dev.mem.view(a + 96, np.float32, 2)
    with pytest.raises(MemoryFault, match="NULL"):
        dev.mem.view(0, np.float32, 1)


def test_cluster_twin_sees_launch_cluster_and_patches_keep_it(tmp_path):
    dev = ReferenceDevice()
    plan = ArenaPlan()
    plan.add("out", (2 * 16,), "u32")  # [2 * blocks] u32
    arena = dev.arena(plan)
    p = Program("cluster")
    p.launch("cluster_probe", (2, 1, 8), 32, [Ref("out")], label="probe", cluster=(1, 1, 4))
    g = dev.graph(dev.bind(p, arena))
    g.launch()
    out = arena.read("out")
    z = np.repeat(np.arange(8), 2)  # flat block b = x + 2 * z
    assert np.array_equal(out[:16], (z % 4) | 4 << 8) and np.array_equal(out[16:], (z + 1) % 4)
    assert param_names("cluster_probe", 1) == ["out"]  # the keyword-only cluster is not a kernel parameter
    g.patch(0, grid=(2, 1, 4))  # the patched launch keeps its cluster
    assert g.bound.ops[0].op.cluster == (1, 1, 4)
    with pytest.raises(LaunchConfigError, match="not a multiple of cluster"):
        g.patch(0, grid=(2, 1, 6))
    g.dot(str(tmp_path / "g.dot"))
    assert "cluster_probe cluster 1x1x4" in (tmp_path / "g.dot").read_text()
    from fixedgraph.backends.base import describe_launch

    assert "block=(32, 1, 1) cluster=(1, 1, 4) shared=0" in describe_launch(0, g.bound.ops[0])

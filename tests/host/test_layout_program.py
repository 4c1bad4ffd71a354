import pytest

from fixedgraph.errors import LaunchConfigError
from fixedgraph.layout import ALIGN, ArenaPlan
from fixedgraph.program import Launch, Program, Ref, Staging


def test_regions_are_aligned_and_disjoint(rng):
    plan = ArenaPlan()
    specs = [(f"r{i}", tuple(int(x) for x in rng.integers(1, 50, size=rng.integers(1, 4))),
              str(rng.choice(["bf16", "f32", "i32", "i64", "u8"]))) for i in range(30)]
    for name, shape, dtype in specs:
        plan.add(name, shape, dtype)
    spans = sorted((r.offset, r.offset + r.nbytes) for r in plan.regions.values())
    assert all(r.offset % ALIGN == 0 for r in plan.regions.values())
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(spans, spans[1:]))
    assert plan.total_bytes >= spans[-1][1] and plan.total_bytes % ALIGN == 0
    assert "total" in plan.table()


def test_plan_errors():
    plan = ArenaPlan()
    plan.add("a", (4,), "f32")
    with pytest.raises(ValueError, match="declared twice"):
        plan.add("a", (4,), "f32")
    with pytest.raises(ValueError, match="unknown dtype"):
        plan.add("b", (4,), "f31")
    with pytest.raises(KeyError, match="no arena region 'zz'"):
        plan["zz"]


def test_program_records_ops_and_stats():
    p = Program("p")
    i = p.copy(Ref("meta"), Staging(64), 128)
    j = p.launch("copy_f32", 4, (256,), [Ref("a"), Ref("b"), 10], label="copy")
    assert (i, j) == (0, 1)
    assert p.ops[1].grid == (4, 1, 1) and p.ops[1].block == (256, 1, 1)
    assert p.stats() == {"launches": 1, "copies": 1, "nodes": 2, "entries": 1}
    with pytest.raises(ValueError):
        p.launch("copy_f32", (0,), (1,), [])
    with pytest.raises(ValueError):
        p.copy(Ref("a"), Ref("b"), 0)


def test_cluster_is_normalised_and_defaults_to_none():
    p = Program("c")
    p.launch("cluster_probe", (2, 1, 8), 32, [Ref("out")], cluster=(1, 1, 4))
    p.launch("cluster_probe", 32, 128, [Ref("out")], cluster=16)
    p.launch("copy_f32", 4, 256, [Ref("a"), Ref("b"), 10], 0, "plain")
    assert [op.cluster for op in p.ops] == [(1, 1, 4), (16, 1, 1), (1, 1, 1)]
    assert [op.cluster_size for op in p.ops] == [4, 16, 1]
    assert p.ops[2].label == "plain"  # shared and label stay positional
    # positional construction of older callers still fills entry..label in order
    old = Launch("copy_f32", 4, 256, [], 128, "x")
    assert (old.shared, old.label, old.cluster) == (128, "x", (1, 1, 1))


@pytest.mark.parametrize("grid, cluster, match", [
    ((2, 1, 6), (1, 1, 4), r"grid \(2, 1, 6\) is not a multiple of cluster \(1, 1, 4\) along z \(6 % 4 = 2\)"),
    ((3,), (2,), r"along x .*round that grid dimension up to a multiple of 2"),
    ((32,), (32,), r"cluster \(32, 1, 1\) has 32 CTAs, more than the 16 .*use a smaller cluster"),
    ((4, 4, 2), (4, 4, 2), r"has 32 CTAs"),
])
def test_cluster_validation_says_what_is_wrong(grid, cluster, match):
    p = Program("bad")
    with pytest.raises(LaunchConfigError, match=match) as info:
        p.launch("cluster_probe", grid, 32, [Ref("out")], label="probe", cluster=cluster)
    assert isinstance(info.value, ValueError) and "cluster_probe (probe)" in str(info.value)
    assert p.ops == []
    with pytest.raises(ValueError, match="cluster dimensions must be 1 to 3 positive ints"):
        p.launch("cluster_probe", 4, 32, [Ref("out")], cluster=(0, 1, 1))

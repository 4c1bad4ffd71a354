import pytest

from fixedgraph.layout import ALIGN, ArenaPlan
from fixedgraph.program import Program, Ref, Staging


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

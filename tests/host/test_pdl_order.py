"""fixedgraph.pdl: the launch-order rule for reads before a PDL wait, on synthetic bound programs,
and the PTX facts it rests on (which entries signal their dependents early)."""

from types import SimpleNamespace

import pytest

from fixedgraph.errors import LaunchConfigError
from fixedgraph.pdl import check_pdl_order
from fixedgraph.ptx import entry_index, parse_ptx

ATT = "paged_attention_decode_rope_d128"


def launch(name, waits=True, early=False, **args):
    entry = SimpleNamespace(name=name, waits=waits, signals_early=early)
    names = tuple(args) or ("x",)
    values = tuple(args.values()) or (0,)
    return SimpleNamespace(entry=entry, values=values, op=SimpleNamespace(label=name), names=names)


def names_of_factory(ops):
    by_entry = {op.entry.name: list(op.names) for op in ops if hasattr(op, "entry")}
    return lambda entry, n: by_entry.get(entry)


def att(layer):
    return launch(ATT, seq_len=1, block_table=2, slots=3, k_pool=100 + layer, v_pool=200 + layer)


def step(embed_early=False, attn_early=False, layers=2):
    ops = [launch("stage_meta_ring"), launch("embed_gather", early=embed_early)]
    for layer in range(layers):
        ops.append(launch("gemv_rmsnorm_bf16_row", early=True))
        a = att(layer)
        a.entry.signals_early = attn_early
        ops.append(a)
        ops += [launch("gemv_bf16_vec", early=True), launch("gemv_rmsnorm_bf16_row", early=True),
                launch("gemv_bf16_vec", early=True)]
    ops.append(launch("gemv_rmsnorm_argmax"))
    return ops


def check(ops):
    check_pdl_order("test", ops, names_of_factory(ops))


def test_the_decode_order_passes():
    check(step() + step())
    check(step(attn_early=True) + step(attn_early=True))  # the embedding gather still fences each step


def test_an_early_embedding_gather_lets_the_attention_race_the_staging_kernel():
    with pytest.raises(LaunchConfigError, match="staged metadata.*launch 0 \\(stage_meta_ring"):
        check(step(embed_early=True))


def test_a_pool_written_by_a_grid_that_may_still_run():
    # layer 0's attention (late) is only past its wait when the next grids start: its K/V write
    # may still be in flight, so a read of the same pool right after it (only early GEMVs
    # between) races it; another layer's pool does not
    base = [launch("stage_meta_ring"), launch("embed_gather"), att(0), launch("gemv_bf16_vec", early=True)]
    with pytest.raises(LaunchConfigError, match="its K/V pool.*launch 2"):
        check(base + [att(0)])
    check(base + [att(1)])


def test_the_fused_stage_needs_a_late_grid_before_the_attention():
    # stage_meta_ring_embed writes the region itself (no embedding launch after it) and signals
    # early: layer 0's norm + qkv must signal late, else the attention can start while the
    # region is written
    for stage_early in (False, True):
        fused = [launch("stage_meta_ring_embed", early=stage_early)]
        with pytest.raises(LaunchConfigError, match="staged metadata.*launch 0 \\(stage_meta_ring_embed"):
            check(fused + [launch("gemv_rmsnorm_bf16_row", early=True), att(0)])
        check(fused + [launch("gemv_rmsnorm_bf16_row_late"), att(0), launch("gemv_bf16_vec", early=True),
                       launch("gemv_rmsnorm_bf16_row_late"), launch("gemv_bf16"), launch("gemv_rmsnorm_argmax")] * 2)
    # an early stage right before the attention: nothing late between them
    with pytest.raises(LaunchConfigError, match="staged metadata.*launch 0 \\(stage_meta_ring_embed"):
        check([launch("stage_meta_ring_embed", early=True), att(0)])


def test_a_full_edge_settles_everything_before_it():
    ops = [launch("stage_meta_ring"), launch("embed_gather", early=True), launch("noop", waits=False),
           launch("gemv_bf16_vec", early=True), att(0)]
    check(ops)
    copy = SimpleNamespace(op=SimpleNamespace(label="copy"))
    check([launch("stage_meta_ring"), copy, launch("gemv_bf16_vec", early=True), att(0)])


def test_ptx_entries_say_when_they_signal():
    head = ".version 8.0\n.target sm_90\n.address_size 64\n"
    text = head + (".visible .entry a()\n{\n\tgriddepcontrol.launch_dependents;\n\tgriddepcontrol.wait;\n\tret;\n}\n"
                   ".visible .entry b()\n{\n\tgriddepcontrol.wait;\n\tgriddepcontrol.launch_dependents;\n\tret;\n}\n"
                   ".visible .entry c()\n{\n\tret;\n}\n")
    e = parse_ptx(text)
    assert (e["a"].waits, e["a"].signals_early) == (True, True)
    assert (e["b"].waits, e["b"].signals_early) == (True, False)
    assert (e["c"].waits, e["c"].signals_early) == (False, False)


def test_committed_ptx_early_entries_are_the_lean_gemvs():
    early = {name for name, (_, e) in entry_index().items() if e.signals_early}
    # the lean GEMVs (gemv_rmsnorm_bf16_row and its deferred-norm forms _dn, _dw count as early: norm +
    # gate_up + SiLU takes them with the late bit of the mode, layer 0's norm + qkv the generic
    # late entry), and the staging
    # kernel (its successor reads only W early); and the read-floor probe's early twin
    # and handover twin (runtime_test.cu's read_probe_early and read_probe_hand, bench_kernels only:
    # they read only their constant source early)
    assert early == {"gemv_bf16_vec", "gemv_rmsnorm_bf16_row", "gemv_rmsnorm_bf16_row_dn", "gemv_rmsnorm_bf16_row_dw",
                     "stage_meta_ring_embed", "read_probe_early", "read_probe_hand"}
    for name in (f"paged_attention_decode_rope_d{d}" for d in (64, 96, 128)):
        assert not entry_index()[name][1].signals_early

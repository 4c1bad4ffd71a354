"""The small ops' twins (embed_norm, rope_kv, act, argmax): tighter than the shared case runner.

tests/reference/test_kernel_cases.py checks every case within its tolerance; a tolerance wide
enough for a float64 formula also hides a misplaced bf16 rounding point. Here the twins must
agree with the formula bit for bit on all but a handful of elements, and negative controls show
that a formula with a rounding point moved fails that bar.
"""
from __future__ import annotations

import inspect

import numpy as np
import pytest

from fixedgraph import bf16
from fixedgraph.backends.reference import ReferenceDevice
from fixedgraph.backends.reference.twins import load_all as load_twins
from fixedgraph.backends.reference.twins.argmax import argmax_nan_low
from fixedgraph.layout import dtype_of
from fixedgraph.ops import act, argmax, embed_norm, rope_kv
from fixedgraph.program import Program, Ref
from fixedgraph.ptx import find_entry
from tests.kernel_cases import inputs_of, load_all, run_case

ENTRIES = ("embed_gather", "add_rmsnorm", "qk_norm_rope_kv", "silu_mul", "argmax_rows")
CASES = {n: f for n, f in load_all().items() if n.startswith(ENTRIES)}


def _mismatches(actual: np.ndarray, expected: np.ndarray, dtype: str) -> int:
    """Elements that differ once the formula is rounded to the buffer's storage type."""
    e = np.asarray(expected, dtype=np.float64).reshape(actual.shape)
    if dtype == "bf16":
        e = bf16.round_f32(e.astype(np.float32)).astype(np.float64)
    else:
        e = e.astype(dtype_of(dtype)).astype(np.float64)
    a = np.asarray(actual, dtype=np.float64)
    same = (a == e) | (np.isnan(a) & np.isnan(e))
    return int((~same).sum())


def _budget(n: int) -> int:
    # fp32 vs float64 can round a value on a bf16 tie boundary the other way (observed: 0-1
    # per case); a misplaced rounding point flips a fifth or more of the elements.
    return 2 + n // 200


@pytest.mark.parametrize("name", sorted(CASES))
def test_twin_is_nearly_bit_exact(name, rng):
    case = CASES[name](rng)
    out = run_case(case, ReferenceDevice())
    expected = case.reference(inputs_of(case))
    for o in case.outputs:
        buf = case.buffers.get(o) or case.host_buffers[o]
        bad = _mismatches(out[o], expected[o], buf.dtype)
        assert bad <= _budget(out[o].size), f"{name}.{o}: {bad}/{out[o].size} elements differ"


def test_norm_rounding_point_is_detected(rng):
    """Negative control: a formula without the bf16 rounding of the normed value misses."""
    case = CASES["add_rmsnorm_1x4096"](rng)
    result = run_case(case, ReferenceDevice())
    h, out = result["hidden"].astype(np.float64), result["out"]
    w = inputs_of(case)["weight"].astype(np.float64)
    normed = h / np.sqrt(np.mean(h * h, axis=1, keepdims=True) + 1e-6)
    assert _mismatches(out, w * normed, "bf16") > _budget(out.size)  # rounding point dropped
    assert _mismatches(out, w * bf16.round_f32(normed.astype(np.float32)), "bf16") <= _budget(out.size)


def test_silu_rounding_point_is_detected(rng):
    case = CASES["silu_mul_3x1536"](rng)
    out = run_case(case, ReferenceDevice())["out"]
    x = inputs_of(case)["gate_up"].astype(np.float64).reshape(3, 2 * 1536)
    g, u = x[:, :1536], x[:, 1536:]
    assert _mismatches(out, g / (1 + np.exp(-g)) * u, "bf16") > _budget(out.size)


def test_ptx_params_match_twin_signatures():
    twins = load_twins()
    for entry in ENTRIES:
        _, ent = find_entry(entry)
        params = list(inspect.signature(twins[entry]).parameters)[3:]  # after mem, grid, block
        assert len(ent.params) == len(params), f"{entry}: PTX has {len(ent.params)} params, twin {params}"


def test_argmax_rule_on_edge_rows():
    nan, inf = np.nan, np.inf
    rows = np.array([
        [nan, nan, nan, nan],  # all NaN -> 0
        [nan, -inf, nan, -inf],  # -inf beats NaN; tie -> 1
        [1.0, 3.0, 3.0, nan],  # tie -> 1
        [nan, -5.0, inf, inf],  # +inf tie -> 2
        [-inf, -inf, -inf, -inf],  # -> 0
    ], dtype=np.float32)
    assert argmax_nan_low(rows).tolist() == [0, 1, 1, 2, 0]


def test_launchers_reject_bad_shapes():
    prog = Program("bad")
    with pytest.raises(ValueError, match="head_dim"):
        rope_kv.qk_norm_rope_kv(prog, *(Ref("x"),) * 9, 1, 4, 2, 258, 1e-6)
    with pytest.raises(ValueError, match="head_dim"):
        rope_kv.qk_norm_rope_kv(prog, *(Ref("x"),) * 9, 1, 4, 2, 63, 1e-6)
    with pytest.raises(ValueError, match="ring_len"):
        argmax.argmax_rows(prog, Ref("t"), Ref("r"), Ref("s"), 0, Ref("l"), 1, 10)
    with pytest.raises(ValueError, match="rows"):
        act.silu_mul(prog, Ref("o"), Ref("g"), 0, 8)
    with pytest.raises(ValueError, match="eps"):
        embed_norm.add_rmsnorm(prog, Ref("h"), None, Ref("w"), Ref("o"), 1, 8, 0.0)
    assert not prog.ops


def test_launch_shapes_fit_the_kernels():
    """Blocks are whole warps (the kernels refuse others) and add_rmsnorm caches rows <= 16384."""
    prog = Program("shapes")
    for H in (1, 99, 100, 576, 4096, 16384, 16383, 32772):
        embed_norm.add_rmsnorm(prog, Ref("h"), None, Ref("w"), Ref("o"), 3, H, 1e-6)
        block = prog.ops[-1].block[0]
        assert block % 32 == 0 and block <= 1024
        if H <= 16384 and H % 4 == 0:
            assert H // 4 <= 8 * block, (H, block)
        embed_norm.embed_gather(prog, Ref("h"), Ref("t"), Ref("k"), 3, H, 10)
    for V in (1, 37, 1000, 151936, 262144):
        argmax.argmax_rows(prog, Ref("t"), None, None, 0, Ref("l"), 2, V)
        assert prog.ops[-1].block[0] % 32 == 0
    rope_kv.qk_norm_rope_kv(prog, *(Ref("x"),) * 9, 100000, 64, 8, 128, 1e-6)
    assert prog.ops[-1].block[0] % 32 == 0 and prog.ops[-1].grid[0] <= rope_kv.MAX_BLOCKS
    act.silu_mul(prog, Ref("o"), Ref("g"), 100000, 12288)
    assert prog.ops[-1].grid[1] <= 65535

"""Co-residency arithmetic (fixedgraph.residency) and the decode attention's footprint class."""
import shutil

import pytest

from fixedgraph import ptx, residency
from fixedgraph.ops.attention import decode_shared_bytes
from fixedgraph.residency import Footprint, SmLimits, fit_beside

ROW = Footprint(80, 256, 8768 + 66 * 1024)  # Qwen3-0.6B's norm + qkv GEMV CTA (~74 KB of shared)


def test_register_and_shared_rounding():
    sm = SmLimits()
    assert Footprint(183, 128, 0).reg_bytes(sm) == 4 * 32 * 184  # per warp, in units of 256
    assert Footprint(225, 128, 0).reg_bytes(sm) == 4 * 32 * 232
    assert Footprint(1, 40, 0).reg_bytes(sm) == 2 * 256  # a partial warp holds a whole warp's
    assert Footprint(32, 128, 1).smem_bytes(sm) == 1024 + 128  # the system's 1 KB + one unit


def test_fit_beside_session_35():
    # the measured case: one attention CTA at 183 registers starts beside two norm + qkv CTAs,
    # one at 225 (the plain entry) or 230 (_swp) does not; alone, two fit either way
    attn = {r: Footprint(r, 128, 7440 + decode_shared_bytes(128)) for r in (183, 225, 230)}
    assert [fit_beside(attn[r], [(ROW, 2)]) for r in (183, 225, 230)] == [1, 0, 0]
    assert [fit_beside(attn[r], []) for r in (183, 225, 230)] == [2, 2, 2]
    assert fit_beside(attn[225], [(ROW, 1)]) == 1
    assert fit_beside(ROW, []) == 3 and fit_beside(ROW, [(ROW, 3)]) == 0
    assert fit_beside(ROW, [(ROW, 4)]) == 0  # overfilled residents: nothing, not a negative count


def test_fit_beside_other_limits():
    tiny = Footprint(16, 32, 0)
    assert fit_beside(tiny, []) == 32  # the CTA limit
    assert fit_beside(Footprint(16, 1024, 0), []) == 2  # the thread limit
    assert fit_beside(Footprint(16, 32, 100 * 1024), []) == 2  # shared memory: 2 x 101 KB of 228
    assert fit_beside(Footprint(16, 32, 0), [(tiny, 31)]) == 1


def test_parse_ptxas_verbose():
    text = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'k_a' for 'sm_90'
ptxas info    : Function properties for k_a
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 183 registers, used 1 barriers, 7440 bytes smem
ptxas info    : Compiling entry function 'k_b' for 'sm_90'
ptxas info    : Function properties for k_b
ptxas info    : Used 12 registers
"""
    assert residency.parse_ptxas_verbose(text) == {"k_a": (183, 7440), "k_b": (12, 0)}


@pytest.mark.skipif(shutil.which("ptxas") is None, reason="ptxas (CUDA toolkit) not on PATH")
def test_swp_entries_keep_their_measured_footprint_class():
    # the _swp entries exist to hold a register footprint class (their idle registers are clock
    # reads ptxas must keep; the count is not additive, so a compiler change could undo it): beside
    # any number of norm + qkv or o_proj CTAs, and alone, each fits exactly as many CTAs as the
    # class measured for it. d128: session 35's, the plain entry's footprint then (225 registers:
    # no CTA beside two norm + qkv CTAs); since session 48's consecutive-key tile loads the plain
    # d128 entries need 189 and fit one there, like _sw_d128. d96, d64: their plain entry's.
    table = residency.ptxas_footprints(ptx.module_paths()["attention"])
    o_proj = Footprint(124, 256, 8768 + 64 * 1024)

    def fp(entry, D):
        regs, static = table[entry]
        return Footprint(regs, 128, static + decode_shared_bytes(D))

    def counts(f):
        return [fit_beside(f, [(n, k)]) for n in (ROW, o_proj) for k in range(4)]

    session_35 = Footprint(225, 128, table["paged_attention_decode_rope_d128"][1] + decode_shared_bytes(128))
    for swp in ("paged_attention_decode_rope_swp_d128", "paged_attention_decode_rope_long_swp_d128"):
        assert counts(fp(swp, 128)) == counts(session_35), (swp, table[swp])
    for plain, swp, D in [("paged_attention_decode_rope_d96", "paged_attention_decode_rope_swp_d96", 96),
                          ("paged_attention_decode_rope_d64", "paged_attention_decode_rope_swp_d64", 64)]:
        assert counts(fp(swp, D)) == counts(fp(plain, D)), (swp, table[swp], plain, table[plain])
    assert fit_beside(fp("paged_attention_decode_rope_swp_d128", 128), [(ROW, 2)]) == 0
    assert fit_beside(fp("paged_attention_decode_rope_sw_d128", 128), [(ROW, 2)]) == 1

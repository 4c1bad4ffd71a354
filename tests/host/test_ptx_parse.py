import pytest

from fixedgraph.errors import PtxError
from fixedgraph.ptx import entry_index, parse_ptx

HEADER = ".version 9.0\n.target sm_90\n.address_size 64\n"


def test_offsets_follow_alignment():
    text = HEADER + """
.visible .entry k(
	.param .u64 .ptr .align 1 k_param_0,
	.param .u8 k_param_1,
	.param .u16 k_param_2,
	.param .f32 k_param_3,
	.param .u64 k_param_4,
	.param .align 8 .b8 k_param_5[24],
	.param .f64 k_param_6
)
{ ret; }
"""
    e = parse_ptx(text)["k"]
    assert [p.offset for p in e.params] == [0, 8, 10, 12, 16, 24, 48]
    assert [p.size for p in e.params] == [8, 1, 2, 4, 8, 24, 8]
    assert e.params[0].is_ptr and not e.params[4].is_ptr
    assert e.param_bytes == 56


def test_entry_without_params():
    e = parse_ptx(HEADER + ".visible .entry nothing()\n{ ret; }\n")["nothing"]
    assert e.params == () and e.param_bytes == 0


@pytest.mark.parametrize("text, match", [
    ("hello world", "no .version"),
    (".version 9.0\n.visible .entry k() {}", "no .target"),
    (HEADER + ".visible .entry k(\n .param .q32 k_p0\n)\n{}", "cannot parse parameter"),
    (HEADER + ".visible .entry k()\n{}\n.visible .entry k()\n{}", "defined twice"),
    (HEADER + ".visible .entry k(\n .param .u32 a,\n\n, .param .u32 b)\n{}", "empty parameter"),
])
def test_malformed_ptx_is_reported(text, match):
    with pytest.raises(PtxError, match=match):
        parse_ptx(text)


def test_committed_ptx_parses_and_has_no_duplicate_entries():
    index = entry_index()
    assert "copy_f32" in index and index["copy_f32"][0] == "runtime_test"
    probe = index["scalars_probe"][1]
    assert [p.bits for p in probe.params] == [64, 8, 16, 32, 64, 32, 64]

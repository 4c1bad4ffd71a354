import struct

import pytest

from fixedgraph.argpack import pack_args, unpack_args
from fixedgraph.errors import ArgumentError
from fixedgraph.ptx import find_entry


def probe():
    return find_entry("scalars_probe")[1]


def test_pack_layout_matches_ptx_offsets():
    e = probe()
    buf, offsets = pack_args(e, [0xDEADBEEF000, 200, -3, 1.5, -(1 << 40), 7, 2.25])
    assert offsets == [p.offset for p in e.params]
    assert struct.unpack_from("<Q", buf, 0)[0] == 0xDEADBEEF000
    assert buf[8] == 200
    assert struct.unpack_from("<h", buf, 10)[0] == -3  # .u16 holds the two's complement of -3
    assert struct.unpack_from("<f", buf, 12)[0] == 1.5
    assert struct.unpack_from("<q", buf, 16)[0] == -(1 << 40)
    assert struct.unpack_from("<d", buf, 32)[0] == 2.25
    assert unpack_args(e, buf)[3] == 1.5


@pytest.mark.parametrize("args, match", [
    ([0, 1, 2, 3.0, 4, 5], "takes 7 arguments"),
    ([0, 256, 2, 3.0, 4, 5, 6.0], r"#1 .*outside \[-128, 255\]"),
    ([0, 1, 2.5, 3.0, 4, 5, 6.0], "#2 .*expects an integer"),
    (["x", 1, 2, 3.0, 4, 5, 6.0], "#0 .*expects a number"),
    ([0, 1, 2, 3.0, 4, True, 6.0], "#5 .*expects a number"),
    ([0, 1, 2, 3.0, 1 << 64, 5, 6.0], "#4 .*outside"),
])
def test_bad_arguments_name_kernel_and_parameter(args, match):
    with pytest.raises(ArgumentError, match=match) as info:
        pack_args(probe(), args)
    assert "scalars_probe" in str(info.value)

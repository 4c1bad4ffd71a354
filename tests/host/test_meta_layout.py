"""The per-pass metadata blob: field layout and the prefix a context bucket stages."""
import numpy as np
import pytest

from fixedgraph.models.meta import MetaLayout


def test_fields_are_aligned_and_disjoint():
    m = MetaLayout(rows=3, table_rows=3, max_blocks=40)
    spans = sorted((f.offset, f.offset + f.nbytes) for f in m.fields.values())
    assert all(off % 16 == 0 for off, _ in spans)
    assert all(a_end <= b for (_, a_end), (b, _) in zip(spans, spans[1:]))
    assert m.nbytes % 16 == 0 and m.nbytes >= spans[-1][1]
    assert m.fields["block_table"].offset == spans[-1][0]  # last: a bucket stages a prefix


@pytest.mark.parametrize("rows,max_blocks,keys,bs", [(1, 256, 128, 16), (1, 256, 129, 16), (4, 64, 100, 32),
                                                     (1, 10, 10 ** 6, 16), (2, 7, 1, 16)])
def test_staged_prefix_holds_every_field_and_the_reachable_table(rows, max_blocks, keys, bs):
    m = MetaLayout(rows, rows, max_blocks)
    n = m.staged_bytes(keys, bs)
    assert n % 16 == 0 and n <= m.nbytes
    blob = np.zeros(m.nbytes, np.uint8)
    blob[:n] = 1  # what the pass stages
    v = m.views(blob)
    for name, f in m.fields.items():
        if name != "block_table":
            assert (blob[f.offset:f.offset + f.nbytes] == 1).all(), name
    used = min(max_blocks, -(-keys // bs))
    table_bytes = v["block_table"].view(np.uint8).reshape(rows, max_blocks * 4)
    assert (table_bytes[:, : used * 4] == 1).all()  # every row's reachable entries are staged


def test_short_contexts_stage_little():
    m = MetaLayout(1, 1, 2560)  # 40960-token context in 16-token blocks: a 10 KB table
    assert m.nbytes > 10_000
    assert m.staged_bytes(128, 16) <= 160

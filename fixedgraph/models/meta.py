"""The per-pass metadata blob (``AttnMeta`` plus the step's inputs) and its byte layout.

The host fills one blob per pass in pinned staging memory; the pass's first node
(``stage_meta``) copies it into the pass's fixed metadata region, and every kernel reads its
fields there through ``Ref(region, field_offset)``. Field offsets depend only on (rows,
block-table rows, max_blocks), so a graph built once keeps working for every step.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

_ALIGN = 16  # bytes; lets stage_meta move the blob 16 bytes at a time
SAMPLE_WORDS = 8  # u32 words of sampling parameters per row (see ops/sample.py)


@dataclass(frozen=True, slots=True)
class Field:
    name: str
    dtype: np.dtype
    count: int
    offset: int  # bytes from the blob start

    @property
    def nbytes(self) -> int:
        return self.count * self.dtype.itemsize


@dataclass(slots=True)
class MetaLayout:
    """Fields of one pass's metadata for ``rows`` token rows and ``table_rows`` block-table rows."""

    rows: int
    table_rows: int
    max_blocks: int
    fields: dict[str, Field] = field(default_factory=dict)
    nbytes: int = 0

    def __post_init__(self) -> None:
        assert self.rows >= 1 and self.table_rows >= 1 and self.max_blocks >= 1
        spec = [
            ("tokens", np.int32, self.rows),  # prefill: input token per row (decode reads `tokens`)
            ("positions", np.uint32, self.rows),  # AttnMeta.positions
            ("slot", np.int64, self.rows),  # AttnMeta.slot; < 0 skips the KV write (padding)
            ("seq_len", np.int32, self.rows),  # AttnMeta.seq_len, incl. the token being decoded
            ("sample", np.uint32, self.rows * SAMPLE_WORDS),  # per-row sampling parameters
            ("last_row", np.int32, 1),  # prefill: the chunk row whose logits are wanted
            ("step", np.uint32, 1),  # index into the token ring
            # Last, so that a pass whose keys fit a context bucket stages only a prefix (staged_bytes).
            ("block_table", np.int32, self.table_rows * self.max_blocks),  # row-major
        ]
        off = 0
        for name, dt, count in spec:
            off = (off + _ALIGN - 1) // _ALIGN * _ALIGN
            f = Field(name, np.dtype(dt), int(count), off)
            self.fields[name] = f
            off += f.nbytes
        self.nbytes = (off + _ALIGN - 1) // _ALIGN * _ALIGN

    def staged_bytes(self, max_keys: int, block_size: int) -> int:
        """Bytes of the blob a pass must stage when every row holds at most ``max_keys`` keys:
        everything up to the last row's first ceil(max_keys / block_size) block-table entries
        (the rest of that row is never read), rounded up to 16 bytes and capped at ``nbytes``.
        Reading the staging slot crosses PCIe, so a short context stages a few hundred bytes
        instead of the whole table."""
        blocks = min(self.max_blocks, max(1, -(-int(max_keys) // int(block_size))))
        end = self.offset("block_table") + ((self.table_rows - 1) * self.max_blocks + blocks) * 4
        return min(self.nbytes, (end + _ALIGN - 1) // _ALIGN * _ALIGN)

    def offset(self, name: str) -> int:
        return self.fields[name].offset

    def views(self, blob: np.ndarray) -> dict[str, np.ndarray]:
        """Typed numpy views of every field over a uint8 blob of ``nbytes``."""
        if blob.nbytes < self.nbytes:
            raise ValueError(f"metadata blob of {blob.nbytes} bytes is smaller than its layout ({self.nbytes})")
        out = {}
        for f in self.fields.values():
            out[f.name] = blob[f.offset : f.offset + f.nbytes].view(f.dtype)
        out["block_table"] = out["block_table"].reshape(self.table_rows, self.max_blocks)
        out["sample"] = out["sample"].reshape(self.rows, SAMPLE_WORDS)
        return out

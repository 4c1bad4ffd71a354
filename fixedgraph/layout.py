"""Arena plans: named regions at fixed offsets inside one allocation.

A plan is pure data. A backend allocates ``plan.total_bytes`` once at boot; every region's
device address is then ``base + region.offset`` for the life of the process (the point of the
design: graphs bake these addresses in).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

ALIGN = 256  # bytes; >= any vector load and the driver's own allocation granularity for tensors

DTYPES: dict[str, np.dtype] = {
    "bf16": np.dtype(np.uint16),  # stored as bit patterns; see fixedgraph.bf16
    "f16": np.dtype(np.float16),
    "f32": np.dtype(np.float32),
    "f64": np.dtype(np.float64),
    "i8": np.dtype(np.int8),
    "u8": np.dtype(np.uint8),
    "i32": np.dtype(np.int32),
    "u32": np.dtype(np.uint32),
    "i64": np.dtype(np.int64),
    "u64": np.dtype(np.uint64),
}


def dtype_of(name: str) -> np.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"unknown dtype {name!r}; known: {', '.join(DTYPES)}") from None


def align_up(n: int, a: int = ALIGN) -> int:
    return (n + a - 1) // a * a


@dataclass(frozen=True, slots=True)
class Region:
    name: str
    shape: tuple[int, ...]
    dtype: str
    offset: int  # bytes from the arena base; a multiple of ALIGN

    @property
    def numel(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    @property
    def itemsize(self) -> int:
        return dtype_of(self.dtype).itemsize

    @property
    def nbytes(self) -> int:
        return self.numel * self.itemsize


@dataclass(slots=True)
class ArenaPlan:
    """Regions in insertion order, each aligned to ``ALIGN`` bytes."""

    regions: dict[str, Region] = field(default_factory=dict)
    total_bytes: int = 0

    def add(self, name: str, shape: tuple[int, ...] | int, dtype: str) -> Region:
        if name in self.regions:
            raise ValueError(f"arena region {name!r} is declared twice")
        shape = (shape,) if isinstance(shape, int) else tuple(int(s) for s in shape)
        if any(s < 0 for s in shape):
            raise ValueError(f"arena region {name!r} has a negative dimension: {shape}")
        dtype_of(dtype)
        region = Region(name, shape, dtype, align_up(self.total_bytes))
        self.regions[name] = region
        self.total_bytes = align_up(region.offset + max(region.nbytes, 1))
        return region

    def __getitem__(self, name: str) -> Region:
        try:
            return self.regions[name]
        except KeyError:
            raise KeyError(f"no arena region {name!r}; the plan has {len(self.regions)} regions") from None

    def __contains__(self, name: str) -> bool:
        return name in self.regions

    def table(self) -> str:
        """A human-readable table of regions with offsets and sizes, and the total."""
        rows = [f"{'region':<32} {'dtype':<5} {'shape':<24} {'offset':>14} {'bytes':>14}"]
        for r in self.regions.values():
            rows.append(f"{r.name:<32} {r.dtype:<5} {str(list(r.shape)):<24} {r.offset:>14,} {r.nbytes:>14,}")
        rows.append(f"{'total':<32} {'':<5} {'':<24} {'':>14} {self.total_bytes:>14,}")
        return "\n".join(rows)

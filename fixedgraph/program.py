"""Backend-neutral programs: ordered kernel launches and copies over arena regions.

A ``Program`` names kernel entries and binds each argument either to an arena region (by name,
plus a byte offset) or to a scalar. It knows nothing of CUDA: the CUDA backend turns it into a
graph, the reference backend into calls of numpy twins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Union


@dataclass(frozen=True, slots=True)
class Ref:
    """A pointer argument: the address of arena region ``region`` plus ``offset`` bytes."""

    region: str
    offset: int = 0


@dataclass(frozen=True, slots=True)
class Null:
    """A NULL pointer argument (optional inputs such as a missing bias)."""


@dataclass(frozen=True, slots=True)
class HostPtr:
    """A pointer argument to a named host-mapped buffer (e.g. the mapped token ring)."""

    name: str
    offset: int = 0


Arg = Union[Ref, Null, HostPtr, int, float]
Dim3 = tuple[int, int, int]


def dim3(v: int | tuple[int, ...]) -> Dim3:
    t = (v,) if isinstance(v, int) else tuple(v)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise ValueError(f"grid/block dimensions must be 1 to 3 positive ints, got {v!r}")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


@dataclass(slots=True)
class Launch:
    entry: str  # PTX .entry name; the same name in the .cu, the PTX and the numpy twin
    grid: Dim3
    block: Dim3
    args: tuple[Arg, ...]
    shared: int = 0  # dynamic shared memory bytes
    label: str = ""  # what this launch does in the model, for profiles and fault reports

    def __post_init__(self) -> None:
        self.grid = dim3(self.grid)
        self.block = dim3(self.block)
        self.args = tuple(self.args)


@dataclass(slots=True)
class Copy:
    """Copy ``nbytes`` from ``src`` to ``dst``. A ``StagingSrc`` source reads pinned host staging."""

    dst: Ref
    src: Union[Ref, "Staging"]
    nbytes: int
    label: str = ""


@dataclass(frozen=True, slots=True)
class Staging:
    """Byte ``offset`` of the pinned host staging buffer (host-written per step metadata)."""

    offset: int = 0


Op = Union[Launch, Copy]


@dataclass(slots=True)
class Program:
    name: str
    ops: list[Op] = field(default_factory=list)

    def launch(self, entry: str, grid, block, args, shared: int = 0, label: str = "") -> int:
        """Append a kernel launch; returns its op index (used to patch it later)."""
        self.ops.append(Launch(entry, grid, block, tuple(args), shared, label))
        return len(self.ops) - 1

    def copy(self, dst: Ref, src: Union[Ref, Staging], nbytes: int, label: str = "") -> int:
        if nbytes <= 0:
            raise ValueError(f"copy of {nbytes} bytes in program {self.name!r}")
        self.ops.append(Copy(dst, src, int(nbytes), label))
        return len(self.ops) - 1

    @property
    def launches(self) -> list[Launch]:
        return [op for op in self.ops if isinstance(op, Launch)]

    def stats(self) -> dict[str, int]:
        """Counts for profiles: launches, copies, nodes, distinct entries."""
        launches = self.launches
        return {
            "launches": len(launches),
            "copies": len(self.ops) - len(launches),
            "nodes": len(self.ops),
            "entries": len({l.entry for l in launches}),
        }

"""Backend-neutral programs: ordered kernel launches and copies over arena regions.

A ``Program`` names kernel entries and binds each argument either to an arena region (by name,
plus a byte offset) or to a scalar. It knows nothing of CUDA: the CUDA backend turns it into a
graph, the reference backend into calls of numpy twins.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Optional, Union

from fixedgraph.errors import LaunchConfigError


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


MAX_CLUSTER_SIZE = 16  # CTAs per cluster on sm_90; above 8 needs the non-portable opt-in


def dim3(v: int | tuple[int, ...], what: str = "grid/block") -> Dim3:
    t = (v,) if isinstance(v, int) else tuple(v)
    if not 1 <= len(t) <= 3 or any(int(x) < 1 for x in t):
        raise ValueError(f"{what} dimensions must be 1 to 3 positive ints, got {v!r}")
    return tuple(int(x) for x in t) + (1,) * (3 - len(t))  # type: ignore[return-value]


@dataclass(slots=True)
class Launch:
    entry: str  # PTX .entry name; the same name in the .cu, the PTX and the numpy twin
    grid: Dim3
    block: Dim3
    args: tuple[Arg, ...]
    shared: int = 0  # dynamic shared memory bytes
    label: str = ""  # what this launch does in the model, for profiles and fault reports
    cluster: Dim3 = (1, 1, 1)  # thread-block cluster (sm_90); (1, 1, 1) is a plain launch
    # preferred shared-memory carveout of this launch, percent of an SM's L1 / shared memory
    # (None: the kernel's own preference); a hint the driver applies when it configures an SM
    carveout: Optional[int] = None

    def __post_init__(self) -> None:
        self.grid = dim3(self.grid)
        self.block = dim3(self.block)
        self.cluster = dim3(self.cluster, "cluster")
        self.args = tuple(self.args)
        if self.carveout is not None and not (isinstance(self.carveout, int) and 0 <= self.carveout <= 100):
            raise LaunchConfigError(f"kernel {self.entry} ({self.label or 'unlabelled'}): carveout {self.carveout!r} "
                                    "is not a percent 0..100 (None: no preference)")
        if self.cluster != (1, 1, 1):
            self._check_cluster()

    @property
    def cluster_size(self) -> int:
        """CTAs per cluster (1 for a plain launch)."""
        return prod(self.cluster)

    def _check_cluster(self) -> None:
        what = f"kernel {self.entry} ({self.label or 'unlabelled'})"
        if self.cluster_size > MAX_CLUSTER_SIZE:
            raise LaunchConfigError(f"{what}: cluster {self.cluster} has {self.cluster_size} CTAs, more than the "
                                    f"{MAX_CLUSTER_SIZE} a cluster can hold; use a smaller cluster")
        for axis, g, c in zip("xyz", self.grid, self.cluster):
            if g % c:
                raise LaunchConfigError(f"{what}: grid {self.grid} is not a multiple of cluster {self.cluster} "
                                        f"along {axis} ({g} % {c} = {g % c}); round that grid dimension up to a "
                                        f"multiple of {c} or pick a cluster dimension that divides {g}")


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

    def launch(self, entry: str, grid, block, args, shared: int = 0, label: str = "", *, cluster=None,
               carveout: Optional[int] = None) -> int:
        """Append a kernel launch; returns its op index (used to patch it later). ``cluster``
        groups CTAs into thread-block clusters (None: no cluster); each grid dimension must be
        a multiple of the cluster's. ``carveout``: this launch's preferred shared-memory carveout
        (percent of the SM's L1 / shared memory; None: the kernel's own)."""
        cluster = (1, 1, 1) if cluster is None else cluster
        self.ops.append(Launch(entry, grid, block, tuple(args), shared, label, cluster=cluster, carveout=carveout))
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

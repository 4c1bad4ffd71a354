"""What both backends share: arenas, host buffers, and programs bound to addresses.

Binding resolves every ``Ref`` to ``arena.base + region.offset + ref.offset`` and packs each
launch's arguments once against the PTX parameter list. A bound program is what a backend runs
eagerly or turns into a graph; it holds plain integers and bytes only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from fixedgraph.argpack import pack_args
from fixedgraph.errors import ArgumentError, FixedGraphError
from fixedgraph.layout import ArenaPlan, dtype_of
from fixedgraph.pdl import check_pdl_order
from fixedgraph.program import Copy, HostPtr, Launch, Null, Program, Ref, Staging
from fixedgraph.ptx import Entry, find_entry


class LaunchFault(FixedGraphError):
    """A kernel faulted; the message names the op index, the kernel, its label and arguments."""


@dataclass
class HostBuffer:
    """Pinned host memory the GPU may address: ``array`` is a uint8 view of it."""

    array: np.ndarray  # [nbytes] u8, host view
    device_addr: int  # the address kernels and copies use (0 if not device-mapped)
    host_addr: int  # the host address (for copies from it)

    def view(self, dtype, count: int | None = None, offset: int = 0) -> np.ndarray:
        dt = np.dtype(dtype)
        n = (self.array.nbytes - offset) // dt.itemsize if count is None else count
        return self.array[offset : offset + n * dt.itemsize].view(dt)


class Arena:
    """One device allocation laid out by an ArenaPlan; region addresses never change."""

    def __init__(self, device, plan: ArenaPlan) -> None:
        self.device, self.plan = device, plan
        self.base = device.alloc(plan.total_bytes)

    def addr(self, name: str, offset: int = 0) -> int:
        region = self.plan[name]
        if not 0 <= offset <= region.nbytes:
            raise ArgumentError(f"offset {offset} is outside region {name!r} of {region.nbytes} bytes")
        return self.base + region.offset + offset

    def write(self, name: str, array: np.ndarray) -> None:
        region = self.plan[name]
        data = np.ascontiguousarray(array)
        if data.dtype != dtype_of(region.dtype) or data.nbytes != region.nbytes:
            raise ValueError(f"region {name!r} holds {region.dtype} {list(region.shape)}; "
                             f"got {data.dtype} {list(data.shape)}")
        self.device.write(self.addr(name), data)

    def read(self, name: str) -> np.ndarray:
        region = self.plan[name]
        raw = self.device.read(self.addr(name), region.nbytes)
        return np.frombuffer(raw, dtype=dtype_of(region.dtype)).reshape(region.shape).copy()

    def fill(self, name: str, byte: int) -> None:
        region = self.plan[name]
        self.device.memset(self.addr(name), byte, region.nbytes)


@dataclass
class BoundLaunch:
    op: Launch
    entry: Entry
    module: str
    values: list  # resolved argument values: ints (addresses, scalars) and floats
    packed: bytes
    offsets: list[int]


@dataclass
class BoundCopy:
    op: Copy
    dst: int
    src: int
    src_is_host: bool


class Bound:
    """A program resolved against one arena (and host buffers); ops in program order."""

    def __init__(self, program: Program, ops: list, resolve: Callable) -> None:
        self.program, self.ops, self.resolve = program, ops, resolve

    def repack(self, index: int, args=None, grid=None) -> BoundLaunch:
        """Re-bind launch ``index`` with new program-level args and/or grid (for patching)."""
        old = self.ops[index]
        if not isinstance(old, BoundLaunch):
            raise ValueError(f"op {index} of {self.program.name} is a copy, not a launch")
        launch = Launch(old.op.entry, grid or old.op.grid, old.op.block,
                        tuple(args) if args is not None else old.op.args, old.op.shared, old.op.label,
                        cluster=old.op.cluster, carveout=old.op.carveout)
        new = bind_launch(launch, self.resolve)
        self.ops[index] = new
        return new


def bind_launch(op: Launch, resolve: Callable) -> BoundLaunch:
    module, entry = find_entry(op.entry)
    values = []
    for i, a in enumerate(op.args):
        try:
            values.append(resolve(a))
        except (KeyError, ArgumentError) as exc:
            msg = exc.args[0] if exc.args else str(exc)
            raise ArgumentError(f"kernel {op.entry} ({op.label or 'unlabelled'}) argument #{i}: {msg}") from None
    packed, offsets = pack_args(entry, values)
    return BoundLaunch(op, entry, module, values, packed, offsets)


def make_resolver(arena: Arena, host: dict[str, HostBuffer]) -> Callable:
    def resolve(arg):
        if isinstance(arg, Ref):
            return arena.addr(arg.region, arg.offset)
        if isinstance(arg, Null):
            return 0
        if isinstance(arg, HostPtr):
            if arg.name not in host:
                raise KeyError(f"no host buffer named {arg.name!r}; pass it when binding")
            return host[arg.name].device_addr + arg.offset
        if isinstance(arg, (int, float)) and not isinstance(arg, bool):
            return arg
        raise ArgumentError(f"cannot pass {type(arg).__name__} {arg!r} to a kernel")

    return resolve


def bind(program: Program, arena: Arena, host: dict[str, HostBuffer] | None = None,
         staging: HostBuffer | None = None) -> Bound:
    host = dict(host or {})
    resolve = make_resolver(arena, host)
    ops: list = []
    for op in program.ops:
        if isinstance(op, Launch):
            ops.append(bind_launch(op, resolve))
            continue
        dst = resolve(op.dst)
        if isinstance(op.src, Staging):
            if staging is None:
                raise ArgumentError(f"program {program.name} copies from staging but no staging buffer was bound")
            if op.src.offset + op.nbytes > staging.array.nbytes:
                raise ArgumentError(f"staging copy of {op.nbytes} bytes at {op.src.offset} overruns "
                                    f"the {staging.array.nbytes}-byte staging buffer")
            ops.append(BoundCopy(op, dst, staging.host_addr + op.src.offset, True))
        else:
            ops.append(BoundCopy(op, dst, resolve(op.src), False))
    check_pdl_order(program.name, ops)
    return Bound(program, ops, resolve)


def describe_launch(index: int, b: BoundLaunch) -> str:
    """One line naming a launch and its arguments (source names where a twin gives them)."""
    from fixedgraph.backends.reference.twins import param_names

    names = param_names(b.entry.name, len(b.entry.params)) or [p.name for p in b.entry.params]
    args = ", ".join(f"{n}={hex(v) if p.bits == 64 and p.kind != 'f' else v}"
                     for n, p, v in zip(names, b.entry.params, b.values))
    cluster = f" cluster={b.op.cluster}" if b.op.cluster_size > 1 else ""
    carveout = f" carveout={b.op.carveout}%" if b.op.carveout is not None else ""
    return (f"op {index} kernel {b.entry.name}{' [' + b.op.label + ']' if b.op.label else ''} "
            f"grid={b.op.grid} block={b.op.block}{cluster} shared={b.op.shared}{carveout} args({args})")


def write_rows(arena: Arena, name: str, row: int, array: np.ndarray) -> None:
    """Write ``array`` into region ``name`` starting at row ``row`` (the region's first axis)."""
    region = arena.plan[name]
    data = np.ascontiguousarray(array)
    if data.dtype != dtype_of(region.dtype):
        raise ValueError(f"region {name!r} holds {region.dtype}; got {data.dtype}")
    row_bytes = region.nbytes // max(region.shape[0], 1) if region.shape else region.nbytes
    offset = row * row_bytes
    if offset + data.nbytes > region.nbytes:
        raise ValueError(f"{data.nbytes} bytes at row {row} overrun region {name!r} ({region.nbytes} bytes)")
    arena.device.write(arena.addr(name, offset), data)

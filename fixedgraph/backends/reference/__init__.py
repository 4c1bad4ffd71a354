"""The reference backend: the same programs, run by numpy twins over a byte arena.

It has the CUDA backend's interface (arenas, host buffers, eager and checked runs, graphs that
record and replay, node patching) so that every layer above runs unchanged without a GPU.

Lagging mode (``ReferenceDevice(lag=True)``, or ``FIXEDGRAPH_REFERENCE_LAG=1`` for the engine):
graph launches queue up like a GPU's stream instead of running when made. ``idle()`` runs one
queued pass per call and says whether the queue is empty, ``synchronize()`` runs them all, and
an eager run runs what is queued first, as stream order would. Nothing else is ordered with the
queue, as on the GPU, where the runner's stream does not block on the legacy stream's
cuMemcpy/cuMemset: arena writes and mapped host memory (staging slots, the token ring) change at
once, and a queued pass reads them when it runs, so races between the host and passes in flight
show on a CPU.
"""
from __future__ import annotations

import os
from collections import deque

import numpy as np

from fixedgraph.argpack import unpack_args
from fixedgraph.backends.base import (Arena, Bound, BoundCopy, BoundLaunch, HostBuffer, LaunchFault,
                                      bind, describe_launch)
from fixedgraph.backends.reference import twins as _twins
from fixedgraph.backends.reference.memory import MemoryFault, RefMemory
from fixedgraph.errors import PtxError
from fixedgraph.layout import ArenaPlan
from fixedgraph.program import Program


class ReferenceDevice:
    kind = "reference"

    def __init__(self, lag: bool | None = None) -> None:
        self.mem = RefMemory()
        self.twins = _twins.load_all()
        self._cluster_twins = {name for name, fn in self.twins.items() if _twins.takes_cluster(fn)}
        self.lag = os.environ.get("FIXEDGRAPH_REFERENCE_LAG", "0") == "1" if lag is None else bool(lag)
        self._queue: deque = deque()  # lagging mode: launched passes not yet run (op lists)
        self._trace: tuple[int, int, int] | None = None  # set_trace's (buffer, counter, capacity)
        self._clock_ns = 0  # the synthetic timer of trace records

    def set_trace(self, buf: int, count: int, cap: int) -> int:
        """The CUDA backend's timeline recording (see fixedgraph.timeline), with synthetic times:
        each launch takes 1 µs, its CTAs start 1 ns apart, pass their wait 100 ns later (their
        last warp 20 ns after the first) and end at 900 ns. buf = 0 turns it off."""
        self._trace = (buf, count, cap) if buf else None
        return 1

    def _record_ctas(self, op) -> None:
        from fixedgraph.timeline import WORDS, fnv1a

        buf, count, cap = self._trace
        n = self.mem.view(count, np.uint32, 1)
        g = op.op.grid
        ctas = int(g[0] * g[1] * g[2])
        t = self._clock_ns
        rec = np.zeros((ctas, WORDS), dtype=np.uint64)
        rec[:, 0] = np.uint64(fnv1a(op.entry.name) << 32)
        rec[:, 1] = np.arange(ctas, dtype=np.uint64)
        rec[:, 2] = t + np.arange(ctas, dtype=np.uint64)
        rec[:, 3] = rec[:, 2] + np.uint64(100)
        rec[:, 4] = np.uint64(t + 900 + ctas)
        rec[:, 5] = rec[:, 3] + np.uint64(20)
        first = int(n[0])
        keep = max(0, min(ctas, cap - first))
        if keep:
            self.mem.view(buf + first * WORDS * 8, np.uint64, keep * WORDS)[:] = rec[:keep].reshape(-1)
        n[0] = first + ctas
        self._clock_ns = t + 1000 + ctas

    def _run_queued(self, n: int | None = None) -> None:
        """Run ``n`` queued passes (all when None), oldest first."""
        while self._queue and (n is None or n > 0):
            ops = self._queue.popleft()
            for i, op in enumerate(ops):
                self._run_op(i, op)
            n = None if n is None else n - 1

    def properties(self) -> dict:
        return {"name": "reference (numpy)", "sm_count": 1, "total_memory": 0, "cc_major": 0, "cc_minor": 0}

    # memory
    def alloc(self, nbytes: int) -> int:
        return self.mem.alloc(nbytes)

    def free(self, addr: int) -> None:
        self.mem.free(addr)

    def alloc_host(self, nbytes: int, mapped: bool = True) -> HostBuffer:
        addr = self.mem.alloc(nbytes)
        # One buffer seen from both sides, like device-mapped pinned memory.
        return HostBuffer(self.mem.view(addr, np.uint8, nbytes), addr if mapped else 0, addr)

    def write(self, addr: int, data) -> None:
        self.mem.write(addr, data)

    def read(self, addr: int, nbytes: int) -> bytes:
        return self.mem.read(addr, nbytes)

    def memset(self, addr: int, byte: int, nbytes: int) -> None:
        self.mem.memset(addr, byte, nbytes)

    def arena(self, plan: ArenaPlan) -> Arena:
        return Arena(self, plan)

    def synchronize(self) -> None:
        self._run_queued()

    def idle(self) -> bool:
        if self._queue:  # lagging mode: the stream makes one pass of progress per query
            self._run_queued(1)
        return not self._queue

    # programs
    def bind(self, program: Program, arena: Arena, host=None, staging=None) -> Bound:
        bound = bind(program, arena, host, staging)
        for op in bound.ops:
            if isinstance(op, BoundLaunch) and op.entry.name not in self.twins:
                raise PtxError(f"kernel {op.entry.name} has no numpy twin in fixedgraph.backends.reference.twins")
        return bound

    def _run_op(self, index: int, op) -> None:
        if isinstance(op, BoundCopy):
            try:
                self.mem.copy(op.dst, op.src, op.op.nbytes)
            except MemoryFault as exc:
                raise LaunchFault(f"op {index} copy {op.op.label or ''}: {exc}") from None
            return
        # Floats as the kernel sees them (rounded to the parameter's width, from the packed bytes);
        # integers as the caller gave them, since PTX parameters carry no signedness.
        if self._trace is not None:
            self._record_ctas(op)
        unpacked = unpack_args(op.entry, op.packed)
        values = [u if isinstance(u, float) else v for u, v in zip(unpacked, op.values)]
        kw = {"cluster": op.op.cluster} if op.entry.name in self._cluster_twins else {}
        try:
            self.twins[op.entry.name](self.mem, op.op.grid, op.op.block, *values, **kw)
        except MemoryFault as exc:
            raise LaunchFault(f"{describe_launch(index, op)}: {exc}") from None

    def run(self, bound: Bound, checked: bool = False) -> None:
        """Run every op in order (the reference backend is always 'checked')."""
        self._run_queued()
        for i, op in enumerate(bound.ops):
            self._run_op(i, op)

    def graph(self, bound: Bound) -> "ReferenceGraph":
        return ReferenceGraph(self, bound)


class ReferenceGraph:
    """Records a bound program at build time; replays the recording; patches only it."""

    def __init__(self, device: ReferenceDevice, bound: Bound) -> None:
        self.device = device
        self.bound = Bound(bound.program, list(bound.ops), bound.resolve)  # private copy
        self.num_nodes = len(self.bound.ops)

    def launch(self) -> None:
        if self.device.lag:  # queued with the ops as they are now (a later patch is not seen)
            self.device._queue.append(list(self.bound.ops))
            return
        for i, op in enumerate(self.bound.ops):
            self.device._run_op(i, op)

    def patch(self, index: int, args=None, grid=None) -> None:
        self.bound.repack(index, args=args, grid=grid)

    def set_staging_src(self, index: int, host_addr: int) -> None:
        op = self.bound.ops[index]
        if not isinstance(op, BoundCopy):
            raise ValueError(f"op {index} is a launch, not a copy")
        self.bound.ops[index] = BoundCopy(op.op, op.dst, host_addr, op.src_is_host)

    def launch_staged(self, copy_index: int, host_addr: int) -> None:
        self.set_staging_src(copy_index, host_addr)
        self.launch()

    def launch_with_u64(self, op_index: int, param_index: int, value: int) -> None:
        op = self.bound.ops[op_index]
        args = list(op.op.args)
        args[param_index] = int(value)
        self.patch(op_index, args=args)
        self.launch()

    def dot(self, path: str) -> None:
        lines = ["digraph fixedgraph {"]
        for i, op in enumerate(self.bound.ops):
            name = op.entry.name if isinstance(op, BoundLaunch) else f"copy {op.op.nbytes}B"
            if isinstance(op, BoundLaunch) and op.op.cluster_size > 1:
                name += f" cluster {'x'.join(map(str, op.op.cluster))}"
            lines.append(f'  n{i} [label="{i}: {name}"];')
            if i:
                lines.append(f"  n{i - 1} -> n{i};")
        lines.append("}")
        with open(path, "w") as f:
            f.write("\n".join(lines) + "\n")

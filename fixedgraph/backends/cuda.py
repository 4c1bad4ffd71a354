"""The CUDA backend: programs as eager launch loops or explicitly built CUDA graphs.

Talks to the driver only through the Cython runtime (fixedgraph._driver, fixedgraph._graph).
Modules are loaded from the committed PTX on first use of one of their entries.
"""
from __future__ import annotations

import ctypes
import os

import numpy as np

from fixedgraph import ptx as ptxmod
from fixedgraph.backends.base import (Arena, Bound, BoundLaunch, HostBuffer, LaunchFault,
                                      bind, describe_launch)
from fixedgraph.errors import CudaError, FixedGraphError, LaunchConfigError
from fixedgraph.layout import ArenaPlan
from fixedgraph.program import Program



CARVEOUT_DEFAULT = "default"  # FIXEDGRAPH_SMEM_CARVEOUT's default (smem_carveout)


def smem_carveout() -> int | None:
    """FIXEDGRAPH_SMEM_CARVEOUT: the preferred shared-memory carveout set on every kernel the
    backend loads, in percent of an SM's unified L1 / shared memory: "max" (100), "default" (no
    preference: the driver's per-kernel choice) or an integer 0..100. Returns None for "default".

    Why it matters here: an SM's split is changed only while the SM is idle, and the driver
    sizes it per kernel. Under programmatic dependent launch the next decode kernels' CTAs are
    placed while earlier ones still run, so they fit only on SMs whose configured shared memory
    has room; a kernel configured for less leaves its SMs closed to them and packs them onto
    the others."""
    raw = os.environ.get("FIXEDGRAPH_SMEM_CARVEOUT", CARVEOUT_DEFAULT).strip().lower()
    if raw in ("default", "-1", ""):
        return None
    if raw == "max":
        return 100
    try:
        pct = int(raw)
    except ValueError:
        pct = -2
    if not 0 <= pct <= 100:
        raise ValueError(f"FIXEDGRAPH_SMEM_CARVEOUT={raw!r}: use \"max\", \"default\" or a percent 0..100 of the "
                         "SM's L1 / shared memory")
    return pct


def _driver():
    from fixedgraph import _driver  # the compiled extension; imported lazily for clear errors

    return _driver


class CudaDevice:
    kind = "cuda"

    def __init__(self, ordinal: int = 0) -> None:
        from fixedgraph import _graph

        self.drv = _driver()
        self._graphmod = _graph
        self.ordinal = ordinal
        self.ctx = self.drv.init(ordinal)
        self.stream = self.drv.stream_create(True)
        self._modules: dict[str, int] = {}
        self._functions: dict[str, int] = {}
        self._shared_optin: dict[str, int] = {}
        self._non_portable: set[str] = set()  # entries allowed clusters of more than 8 CTAs
        self._clusters_ok: set[tuple] = set()  # (entry, grid, block, shared, cluster) the driver can schedule
        self._host: list[int] = []
        self._props = self.drv.device_properties(ordinal)
        self._carveout = smem_carveout()  # read once per device, before any kernel is loaded
        # FIXEDGRAPH_SMEM_CARVEOUT_ENTRIES="a,b": only those entries take it (an A/B knob)
        names = os.environ.get("FIXEDGRAPH_SMEM_CARVEOUT_ENTRIES", "").strip()
        self._carveout_entries = set(n.strip() for n in names.split(",") if n.strip()) or None
        # Programmatic dependent launch (Hopper+): graph edges into kernels that wait on their
        # predecessor let the next launch overlap the previous kernel's tail.
        self.use_pdl = self._props["cc_major"] >= 9 and os.environ.get("FIXEDGRAPH_PDL", "1") != "0"

    def properties(self) -> dict:
        return dict(self._props)

    # memory
    def alloc(self, nbytes: int) -> int:
        return self.drv.mem_alloc(nbytes)

    def free(self, addr: int) -> None:
        self.drv.mem_free(addr)

    def alloc_host(self, nbytes: int, mapped: bool = True) -> HostBuffer:
        h, d = self.drv.host_alloc(nbytes, mapped)
        self._host.append(h)
        array = np.frombuffer((ctypes.c_uint8 * max(nbytes, 1)).from_address(h), dtype=np.uint8)[:nbytes]
        return HostBuffer(array, d, h)

    def write(self, addr: int, data) -> None:
        arr = np.ascontiguousarray(data)
        self.drv.memcpy_htod(addr, arr.ctypes.data, arr.nbytes)

    def read(self, addr: int, nbytes: int) -> bytes:
        out = np.empty(nbytes, dtype=np.uint8)
        self.drv.memcpy_dtoh(out.ctypes.data, addr, nbytes)
        return out.tobytes()

    def memset(self, addr: int, byte: int, nbytes: int) -> None:
        self.drv.memset_d8(addr, byte, nbytes)

    def arena(self, plan: ArenaPlan) -> Arena:
        return Arena(self, plan)

    def synchronize(self) -> None:
        self.drv.stream_synchronize(self.stream)

    def idle(self) -> bool:
        """True when the stream has run everything queued; raises if that work faulted. Never blocks."""
        return self.drv.stream_query(self.stream)

    # kernels
    def function(self, module: str, entry: str) -> int:
        f = self._functions.get(entry)
        if f is None:
            if module not in self._modules:
                path = ptxmod.module_paths()[module]
                try:
                    self._modules[module] = self.drv.module_load(path.read_bytes())
                except CudaError as exc:
                    raise CudaError(f"loading {path.name}", exc.code, exc.name, exc.text, detail=exc.detail) from None
            f = self._functions[entry] = self.drv.module_function(self._modules[module], entry)
            if self._carveout is not None and (self._carveout_entries is None or entry in self._carveout_entries):
                self.drv.function_set_carveout(f, self._carveout)
        return f

    def function_attributes(self, entry: str) -> dict:
        module, _ = ptxmod.find_entry(entry)
        return self.drv.function_attributes(self.function(module, entry))

    def _prepare(self, op: BoundLaunch) -> int:
        f = self.function(op.module, op.entry.name)
        # NOTE: the 48 KiB default limit covers static + dynamic shared memory together, so any
        # dynamic size above what was opted in so far is declared (cheap: once per entry and size).
        if op.op.shared > self._shared_optin.get(op.entry.name, 0):
            self.drv.function_set_max_dynamic_shared(f, op.op.shared)
            self._shared_optin[op.entry.name] = op.op.shared
        if op.op.cluster_size > 1:
            self._check_cluster(f, op)
        return f

    def _check_cluster(self, f: int, op: BoundLaunch) -> None:
        """Opt in to non-portable sizes (> 8 CTAs) and ask the driver whether at least one
        cluster of this geometry fits on the GPU, so an impossible one fails at bind time."""
        launch, name = op.op, op.entry.name
        key = (name, launch.grid, launch.block, launch.shared, launch.cluster)
        if key in self._clusters_ok:
            return
        what = (f"kernel {name} ({launch.label or 'unlabelled'}) cluster {launch.cluster} ({launch.cluster_size} CTAs) "
                f"of block {launch.block} with {launch.shared} bytes of dynamic shared memory")
        if self._props["cc_major"] < 9:
            raise LaunchConfigError(f"{what}: thread-block clusters need compute capability 9.0 or newer, this GPU is "
                                    f"{self._props['cc_major']}.{self._props['cc_minor']}; launch without a cluster")
        if launch.cluster_size > 8 and name not in self._non_portable:
            self.drv.function_set_non_portable_cluster(f)
            self._non_portable.add(name)
        try:
            n = self.drv.function_max_active_clusters(f, launch.grid, launch.block, launch.shared, launch.cluster)
        except CudaError as exc:
            raise LaunchConfigError(f"{what}: the driver rejects it ({exc.name}: {exc.text}); "
                                    "use a smaller cluster, block or shared memory size") from None
        if n == 0:
            raise LaunchConfigError(f"{what}: no such cluster fits on this GPU at once (max active clusters 0); "
                                    "use a smaller cluster, or less shared memory or fewer threads per CTA")
        self._clusters_ok.add(key)

    # programs
    def bind(self, program: Program, arena: Arena, host=None, staging=None) -> Bound:
        bound = bind(program, arena, host, staging)
        bound.oplist = self._oplist(bound)
        return bound

    def _oplist(self, bound: Bound):
        ops = self._graphmod.OpList()
        for op in bound.ops:
            if isinstance(op, BoundLaunch):
                ops.add_kernel(self._prepare(op), op.op.grid, op.op.block, op.op.shared, op.packed, op.offsets,
                               op.entry.waits, cluster=op.op.cluster,
                               carveout=-1 if op.op.carveout is None else op.op.carveout)
            else:
                ops.add_copy(op.dst, op.src, op.op.nbytes, op.src_is_host)
        return ops

    def _fault(self, bound: Bound, exc: CudaError) -> Exception:
        i = exc.op_index
        if i is None or i >= len(bound.ops):
            return exc
        op = bound.ops[i]
        where = describe_launch(i, op) if isinstance(op, BoundLaunch) else f"op {i} copy {op.op.label}"
        return LaunchFault(f"{where}: {exc.name} ({exc.code})")

    def set_trace(self, buf: int, count: int, cap: int) -> int:
        """Point every loaded module's timeline globals (timeline-traced PTX, see ptx/src/pdl.cuh)
        at a record buffer and its u32 counter; buf = 0 turns recording off. Returns the modules
        set; raises when a loaded module was built without tracing."""
        untraced = []
        for name, mod in self._modules.items():
            g = {k: self.drv.module_global(mod, k) for k in ("fg_trace_buf", "fg_trace_count", "fg_trace_cap")}
            if any(v is None for v in g.values()):
                untraced.append(name)
                continue
            self.drv.memcpy_htod(g["fg_trace_buf"][0], np.array([buf], np.uint64).ctypes.data, 8)
            self.drv.memcpy_htod(g["fg_trace_count"][0], np.array([count], np.uint64).ctypes.data, 8)
            self.drv.memcpy_htod(g["fg_trace_cap"][0], np.array([cap], np.uint32).ctypes.data, 4)
        if untraced:
            raise FixedGraphError(f"modules {', '.join(sorted(untraced))} carry no timeline globals: build them "
                                  "with `tools/build_ptx.py --trace DIR` and set FIXEDGRAPH_PTX_DIR=DIR before "
                                  "the engine loads any kernel")
        return len(self._modules)

    def run(self, bound: Bound, checked: bool = False) -> None:
        """Launch every op eagerly through the Cython loop; ``checked`` pins faults to an op."""
        try:
            bound.oplist.run(self.stream, checked)
        except CudaError as exc:
            raise self._fault(bound, exc) from None

    def graph(self, bound: Bound) -> "CudaGraph":
        return CudaGraph(self, bound)


class CudaGraph:
    """An instantiated graph of a bound program, with in-place node patching."""

    def __init__(self, device: CudaDevice, bound: Bound) -> None:
        self.device = device
        # The graph owns its own packed ops so patching it never changes the eager program.
        self.bound = Bound(bound.program, list(bound.ops), bound.resolve)
        self.ops = device._oplist(self.bound)
        self.bound.oplist = self.ops  # device.run(graph.bound) runs the graph's ops eagerly
        self.exe = device._graphmod.GraphExec(self.ops, device.ctx, device.stream, device.use_pdl)
        self.num_nodes = self.exe.num_nodes
        self.num_programmatic = self.exe.num_programmatic

    def launch(self) -> None:
        self.exe.launch(self.device.stream)

    def patch(self, index: int, args=None, grid=None) -> None:
        new = self.bound.repack(index, args=args, grid=grid)
        self.ops.set_kernel_args(index, new.packed)
        self.ops.set_kernel_grid(index, new.op.grid)
        self.exe.patch(index)

    def set_staging_src(self, index: int, host_addr: int) -> None:
        self.ops.set_copy_src(index, host_addr)
        self.exe.patch(index)

    def launch_staged(self, copy_index: int, host_addr: int) -> None:
        self.exe.launch_staged(copy_index, host_addr, self.device.stream)

    def launch_with_u64(self, op_index: int, param_index: int, value: int) -> None:
        """Set one 64-bit kernel parameter of one node (a staging pointer), patch, launch."""
        self.exe.launch_with_u64(op_index, param_index, value, self.device.stream)

    def dot(self, path: str) -> None:
        self.exe.debug_dot(path)

"""``fixedgraph doctor``: what this machine offers and whether a graph runs end to end."""
from __future__ import annotations

import platform
import time

import numpy as np

from fixedgraph import __version__, knobs
from fixedgraph.backends import get_device
from fixedgraph.layout import ArenaPlan
from fixedgraph.program import Program, Ref
from fixedgraph.ptx import entry_index, module_paths


def _versions() -> dict:
    out = {"fixedgraph": __version__, "python": platform.python_version()}
    try:
        from importlib.metadata import version

        out["cuda-bindings"] = version("cuda-bindings")
    except Exception as exc:
        out["cuda-bindings"] = f"missing ({exc})"
    return out


def smoke_graph(device, n: int = 1 << 20, nodes: int = 64) -> dict:
    """A chain of axpy/copy nodes over a small arena, checked against numpy, graph and eager."""
    plan = ArenaPlan()
    plan.add("x", (n,), "f32")
    plan.add("y", (n,), "f32")
    plan.add("z", (n,), "f32")
    arena = device.arena(plan)
    rng = np.random.default_rng()
    x, y = rng.standard_normal(n).astype(np.float32), rng.standard_normal(n).astype(np.float32)
    arena.write("x", x)
    arena.write("y", y)
    prog = Program("doctor")
    for i in range(nodes // 2):
        prog.launch("axpy_f32", 264, 256, [Ref("y"), Ref("x"), 0.5, n], label=f"axpy {i}")
        prog.launch("copy_f32", 264, 256, [Ref("z"), Ref("y"), n], label=f"copy {i}")
    bound = device.bind(prog, arena)
    t0 = time.perf_counter()
    graph = device.graph(bound)
    build_ms = (time.perf_counter() - t0) * 1e3
    graph.launch()
    device.synchronize()
    expect = y.astype(np.float64) + 0.5 * (nodes // 2) * x
    err = float(np.abs(arena.read("z") - expect).max())
    t0 = time.perf_counter()
    graph.launch()
    device.synchronize()
    run_ms = (time.perf_counter() - t0) * 1e3
    device.free(arena.base)
    return {"nodes": graph.num_nodes, "graph_build_ms": build_ms, "graph_run_ms": run_ms,
            "max_abs_error": err, "ok": err < 1e-3 * (1 + np.abs(expect).max())}


def doctor(backend: str | None = None) -> dict:
    report: dict = {"versions": _versions(), "knobs": {"set": knobs.set_knobs(), "unknown": knobs.unknown()}}
    device = get_device(backend)
    report["backend"] = device.kind
    if device.kind == "reference":
        report["why_reference"] = _why_no_cuda()
    report["device"] = device.properties()
    report["host"] = _host_cpus(report["device"].get("pci_bus_id"))
    report["ptx"] = {"modules": len(module_paths()), "entries": len(entry_index())}
    report["smoke_graph"] = smoke_graph(device)
    return report


def _host_cpus(pci_bus_id: str | None) -> dict:
    """The CPUs this process may run on and those the kernel lists as local to the GPU (where
    the decode loop's thread belongs on a host with several NUMA nodes; LLM(cpu_affinity="gpu"))."""
    from fixedgraph import hostcpu

    local = hostcpu.gpu_local_cpus(pci_bus_id) if pci_bus_id else None
    return {"cpus_allowed": hostcpu.format_cpus(hostcpu.allowed_cpus()), "gpu_pci_bus_id": pci_bus_id,
            "gpu_local_cpus": hostcpu.format_cpus(local) if local else None}


def _why_no_cuda() -> str:
    try:
        from fixedgraph.backends.cuda import CudaDevice

        CudaDevice(0)
        return "CUDA works; the reference backend was requested"
    except Exception as exc:
        return str(exc)


def format_report(r: dict) -> str:
    lines = [f"fixedgraph {r['versions']['fixedgraph']}  python {r['versions']['python']}  "
             f"cuda-bindings {r['versions']['cuda-bindings']}", f"backend: {r['backend']}"]
    if "why_reference" in r:
        lines.append(f"  (no GPU: {r['why_reference']})")
    d = r["device"]
    if r["backend"] == "cuda":
        lines.append(f"GPU: {d['name']}  sm_{d['cc_major']}{d['cc_minor']}  {d['sm_count']} SMs  "
                     f"{d['total_memory'] / 2**30:.1f} GiB ({d.get('free_memory', 0) / 2**30:.1f} free)  "
                     f"L2 {d['l2_bytes'] / 2**20:.0f} MiB  driver {d['driver_version']}")
    h = r.get("host", {})
    if h:
        near = (f"; the GPU ({h['gpu_pci_bus_id']}) is local to CPUs {h['gpu_local_cpus']}"
                if h.get("gpu_local_cpus") else "")
        lines.append(f"host: CPUs {h['cpus_allowed']} allowed{near}")
    lines.append(f"PTX: {r['ptx']['modules']} modules, {r['ptx']['entries']} kernel entries")
    k = r.get("knobs", {})
    if k.get("set"):
        lines.append("environment: " + "  ".join(f"{n}={v}" for n, v in k["set"].items()))
    if k.get("unknown"):
        lines += ["WARNING: " + line for line in knobs.describe_unknown(k["unknown"]).splitlines()]
    s = r["smoke_graph"]
    lines.append(f"smoke graph: {s['nodes']} nodes, built in {s['graph_build_ms']:.1f} ms, ran in "
                 f"{s['graph_run_ms']:.2f} ms, max error {s['max_abs_error']:.2e}: {'OK' if s['ok'] else 'FAILED'}")
    return "\n".join(lines)

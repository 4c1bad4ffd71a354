"""Which CPUs the decode loop's thread runs on.

The per-step host work is a few slot writes and one ``cuGraphLaunch``: a few microseconds on a
core near the GPU. On hosts with more than one NUMA node, a thread the OS places (or migrates)
onto a node far from the GPU pays for every access to pinned host memory (the staging slots, the
token ring, the driver's command buffers) across the socket link, and the same code then spends
several times longer per step. ``bind_thread`` restricts the calling thread (and the threads it
starts afterwards) to the CPUs the kernel lists as local to the GPU's PCI device, within the CPUs
the process may use (taskset, cgroups). Other threads of the application keep their affinity.

Spec (``LLM(cpu_affinity=...)`` or ``FIXEDGRAPH_CPU_AFFINITY``): ``"gpu"`` (the GPU's local CPUs),
``"off"`` (leave the affinity alone) or a CPU list such as ``"0-7,16"``.
"""
from __future__ import annotations

import os
from pathlib import Path

SYSFS_PCI = Path("/sys/bus/pci/devices")


def parse_cpulist(text: str) -> set[int]:
    """``"0-3,8,10-11"`` -> {0, 1, 2, 3, 8, 10, 11} (the kernel's cpulist format)."""
    cpus: set[int] = set()
    for part in text.strip().split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"bad CPU list {text!r}: expected numbers and ranges such as '0-7,16'")
        a, b = int(lo), int(hi) if sep else int(lo)
        if b < a:
            raise ValueError(f"bad CPU list {text!r}: range {part} runs backwards")
        cpus.update(range(a, b + 1))
    if not cpus:
        raise ValueError(f"bad CPU list {text!r}: no CPUs in it")
    return cpus


def sysfs_name(pci_bus_id: str) -> str:
    """CUDA's PCI bus id ("0000:1B:00.0" or "00000000:1b:00.0") as sysfs names the device."""
    try:
        domain, bus, rest = pci_bus_id.strip().split(":")
        dev, fn = rest.split(".")
        return f"{int(domain, 16):04x}:{int(bus, 16):02x}:{int(dev, 16):02x}.{int(fn, 16):x}"
    except ValueError:
        raise ValueError(f"bad PCI bus id {pci_bus_id!r}: expected domain:bus:device.function") from None


def gpu_local_cpus(pci_bus_id: str, sysfs: Path = SYSFS_PCI) -> set[int] | None:
    """The CPUs the kernel lists as local to the device, or None where it says nothing (no
    sysfs entry, or a host with one node, where the list is every CPU)."""
    path = sysfs / sysfs_name(pci_bus_id) / "local_cpulist"
    try:
        return parse_cpulist(path.read_text())
    except (OSError, ValueError):
        return None


def resolve(spec: str | None, pci_bus_id: str | None, allowed: set[int],
            sysfs: Path = SYSFS_PCI) -> set[int] | None:
    """The CPU set ``spec`` asks for, within ``allowed``; None: leave the affinity as it is."""
    spec = (spec or "off").strip().lower()
    if spec in ("off", "none", ""):
        return None
    if spec == "gpu":
        local = gpu_local_cpus(pci_bus_id, sysfs) if pci_bus_id else None
        if not local:
            return None
        cpus = local & allowed
        return cpus if cpus and cpus != allowed else None  # none usable, or already all of them
    cpus = parse_cpulist(spec)
    if not cpus & allowed:
        raise ValueError(f"cpu_affinity {spec!r} names none of the CPUs this process may use "
                         f"({format_cpus(allowed)}): pick CPUs from that list, or 'gpu' / 'off'")
    return cpus & allowed


def format_cpus(cpus: set[int]) -> str:
    """{0, 1, 2, 5} -> "0-2,5"."""
    runs: list[list[int]] = []
    for c in sorted(cpus):
        if runs and c == runs[-1][1] + 1:
            runs[-1][1] = c
        else:
            runs.append([c, c])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in runs)


def allowed_cpus() -> set[int]:
    """The CPUs the calling thread may run on (taskset, cgroups), or all of them where the OS
    does not say."""
    if hasattr(os, "sched_getaffinity"):
        return set(os.sched_getaffinity(0))
    return set(range(os.cpu_count() or 1))


def bind_thread(spec: str | None, pci_bus_id: str | None) -> set[int] | None:
    """Restrict the calling thread to ``spec``'s CPUs (see the module doc); returns them, or None
    when the affinity was left alone."""
    if not hasattr(os, "sched_setaffinity"):
        return None
    cpus = resolve(spec, pci_bus_id, allowed_cpus())
    if cpus is not None:
        os.sched_setaffinity(0, cpus)  # pid 0: the calling thread on Linux
    return cpus


def current_cpu() -> int:
    """The CPU the calling thread ran on last (the processor field of /proc/thread-self/stat),
    or -1."""
    try:
        stat = Path("/proc/thread-self/stat").read_text()
        return int(stat[stat.rindex(")") + 2:].split()[36])  # field 39; fields 1-2 end at ')'
    except (OSError, ValueError, IndexError):
        return -1


def cpu_mhz(cpu: int, cpuinfo: Path = Path("/proc/cpuinfo")) -> float:
    """The clock /proc/cpuinfo reports for ``cpu`` (MHz; many hypervisors report a fixed one), or
    NaN."""
    try:
        blocks = cpuinfo.read_text().split("\n\n")
    except OSError:
        return float("nan")
    for b in blocks:
        fields = dict(ln.split(":", 1) for ln in b.splitlines() if ":" in ln)
        fields = {k.strip(): v.strip() for k, v in fields.items()}
        if fields.get("processor") == str(cpu) and "cpu MHz" in fields:
            try:
                return float(fields["cpu MHz"])
            except ValueError:
                return float("nan")
    return float("nan")


def speed_probe(rounds: int = 2000, reps: int = 7) -> dict:
    """The decode loop's kind of host work, with no GPU and no driver call: ``rounds`` rounds of
    numpy scalar stores and int arithmetic, like a decode step's slot writes, timed ``reps``
    times by the wall clock and by the thread's CPU clock (ns per round: best and median).

    Run beside a decode in the same thread, it tells a slow host step's cause apart: the CPU
    running this thread slowly (the probe slows with the step) or the step's own work, the driver
    call included (the probe keeps its usual speed). Also the CPU it ran on and that CPU's clock
    as /proc/cpuinfo reports it."""
    import time

    import numpy as np

    slots = np.zeros((4, 8), dtype=np.int64)
    wall, cpu = [], []
    for _ in range(reps):
        t0, c0 = time.perf_counter(), time.thread_time()
        for i in range(rounds):
            v = slots[i & 3]
            v[0] = i
            v[1] = (i >> 4) * 16 + (i & 15)
            v[2] = i + 1
            v[3] = i % 7
        c1, t1 = time.thread_time(), time.perf_counter()
        wall.append((t1 - t0) / rounds * 1e9)
        cpu.append((c1 - c0) / rounds * 1e9)
    wall.sort()
    cpu.sort()
    where = current_cpu()
    return {"wall_ns_best": wall[0], "wall_ns_median": wall[len(wall) // 2],
            "cpu_ns_best": cpu[0], "cpu_ns_median": cpu[len(cpu) // 2],
            "cpu": where, "cpu_mhz": cpu_mhz(where)}

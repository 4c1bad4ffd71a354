"""Kernel cases: one launch (or a few) of PTX kernels on fresh random inputs, with an
independent float64 formula for the expected outputs.

Each case module registers factories with ``@kernel_case``. A factory takes a
``numpy.random.Generator`` and returns a ``KernelCase``. The same case runs:
- on the reference backend against ``case.reference`` (tests/reference, CI), and
- on the CUDA backend against the reference backend and ``case.reference`` (tests/gpu, H200).
"""
from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

from fixedgraph import bf16
from fixedgraph.layout import dtype_of
from fixedgraph.program import Program

FACTORIES: dict[str, Callable[[np.random.Generator], "KernelCase"]] = {}


@dataclass
class Buffer:
    data: np.ndarray  # initial contents; bf16 as uint16 bits. Outputs start poisoned (never zeros).
    dtype: str  # layout dtype name: "bf16", "f32", "i32", "i64", "u32", ...


@dataclass
class Check:
    atol: float = 0.0
    rtol: float = 0.0


@dataclass
class KernelCase:
    name: str
    program: Program  # launches whose Ref args name the buffers below
    buffers: dict[str, Buffer]
    outputs: dict[str, Check]  # buffers compared after the program runs
    # inputs as float values (bf16 -> float32; others unchanged) -> expected output values
    reference: Callable[[dict[str, np.ndarray]], dict[str, np.ndarray]] | None = None
    notes: str = ""
    host_buffers: dict[str, Buffer] = field(default_factory=dict)  # HostPtr targets, if any


def kernel_case(name: str):
    def register(fn):
        if name in FACTORIES:
            raise ValueError(f"kernel case {name!r} registered twice")
        FACTORIES[name] = fn
        return fn

    return register


def load_all() -> dict[str, Callable]:
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return FACTORIES


def as_values(buf: Buffer) -> np.ndarray:
    """A buffer's contents as numbers: bf16 bits become float32 values."""
    return bf16.to_f32(buf.data) if buf.dtype == "bf16" else buf.data


def poison(shape, dtype: str) -> Buffer:
    """An output buffer filled with a value no kernel should leave behind (NaN, or a sentinel)."""
    if dtype == "bf16":
        return Buffer(np.full(shape, 0x7FC1, dtype=np.uint16), "bf16")
    np_dtype = dtype_of(dtype)
    if np_dtype.kind == "f":
        return Buffer(np.full(shape, np.nan, dtype=np_dtype), dtype)
    sentinel = np.iinfo(np_dtype).max - 7  # odd, large, never a valid index
    return Buffer(np.full(shape, sentinel, dtype=np_dtype), dtype)


def rand_bf16(rng: np.random.Generator, shape, scale: float = 1.0) -> Buffer:
    return Buffer(bf16.from_f32(rng.standard_normal(shape).astype(np.float32) * scale), "bf16")


def run_case(case: KernelCase, device, graph: bool = False) -> dict[str, np.ndarray]:
    """Allocate the case's buffers in one arena on ``device``, run its program (eagerly, or as
    a graph), and return every output as numbers."""
    from fixedgraph.layout import ArenaPlan

    plan = ArenaPlan()
    for name, buf in case.buffers.items():
        plan.add(name, buf.data.shape, buf.dtype)
    arena = device.arena(plan)
    for name, buf in case.buffers.items():
        arena.write(name, buf.data.astype(dtype_of(buf.dtype), copy=False))
    host = {}
    for name, buf in case.host_buffers.items():
        hb = device.alloc_host(buf.data.nbytes, mapped=True)
        hb.array[:] = np.frombuffer(np.ascontiguousarray(buf.data).tobytes(), np.uint8)
        host[name] = hb
    bound = device.bind(case.program, arena, host)
    if graph:
        device.graph(bound).launch()
    else:
        device.run(bound, checked=True)
    device.synchronize()
    out = {}
    for name in case.outputs:
        if name in case.buffers:
            b = case.buffers[name]
            out[name] = as_values(Buffer(arena.read(name), b.dtype))
        else:
            b = case.host_buffers[name]
            raw = host[name].view(dtype_of(b.dtype), b.data.size).reshape(b.data.shape).copy()
            out[name] = as_values(Buffer(raw, b.dtype))
    return out


def inputs_of(case: KernelCase) -> dict[str, np.ndarray]:
    vals = {n: as_values(b) for n, b in case.buffers.items()}
    vals.update({n: as_values(b) for n, b in case.host_buffers.items()})
    return vals


def compare(name: str, actual: np.ndarray, expected: np.ndarray, check: Check) -> str | None:
    """None when ``actual`` matches within tolerance, else a message with the worst element."""
    a = np.asarray(actual, dtype=np.float64)
    e = np.asarray(expected, dtype=np.float64).reshape(a.shape)
    if np.isnan(a).any() and not np.array_equal(np.isnan(a), np.isnan(e)):
        return f"{name}: {int(np.isnan(a).sum())} NaN elements (unwritten or poisoned output?)"
    finite = ~np.isnan(e)
    err = np.abs(a - e)
    bound = check.atol + check.rtol * np.abs(e)
    bad = finite & ~(err <= bound)
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err - bound, -np.inf)), a.shape)
        return (f"{name}: {int(bad.sum())}/{a.size} elements off; worst at {tuple(int(x) for x in i)}: "
                f"got {a[i]!r}, expected {e[i]!r} (atol {check.atol}, rtol {check.rtol})")
    return None

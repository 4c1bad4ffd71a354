"""Pack kernel arguments into the byte layout the PTX parameter list declares."""
from __future__ import annotations

import math
import struct

from fixedgraph.errors import ArgumentError
from fixedgraph.ptx import Entry, Param

_FMT = {("u", 8): "B", ("s", 8): "b", ("b", 8): "B", ("u", 16): "H", ("s", 16): "h", ("b", 16): "H",
        ("f", 16): "e", ("u", 32): "I", ("s", 32): "i", ("b", 32): "I", ("f", 32): "f",
        ("u", 64): "Q", ("s", 64): "q", ("b", 64): "Q", ("f", 64): "d"}


def _fail(entry: Entry, i: int, p: Param, why: str) -> ArgumentError:
    return ArgumentError(f"kernel {entry.name}: argument #{i} ({p.name}, .{p.kind}{p.bits}"
                         f"{' pointer' if p.is_ptr else ''}): {why}")


def pack_value(entry: Entry, i: int, p: Param, value) -> bytes:
    if p.count != 1:
        if not isinstance(value, (bytes, bytearray)) or len(value) != p.size:
            raise _fail(entry, i, p, f"expects {p.size} raw bytes (a struct by value), got {type(value).__name__}")
        return bytes(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _fail(entry, i, p, f"expects a number, got {type(value).__name__} {value!r}")
    fmt = _FMT[(p.kind, p.bits)]
    if p.kind == "f":
        if p.bits == 16 and math.isfinite(value) and abs(value) > 65504:
            raise _fail(entry, i, p, f"{value} overflows f16")
        return struct.pack("<" + fmt, float(value))
    if isinstance(value, float):
        raise _fail(entry, i, p, f"expects an integer, got float {value!r}")
    # nvcc declares every integer parameter .u (an `int` is .u32, a `long long` .u64), so a
    # .u/.b parameter takes the signed range too and negatives are stored two's complement.
    lo = -(1 << (p.bits - 1))
    hi = (1 << (p.bits - 1)) - 1 if p.kind == "s" else (1 << p.bits) - 1
    if not lo <= value <= hi:
        raise _fail(entry, i, p, f"{value} is outside [{lo}, {hi}]")
    if value < 0 and p.kind != "s":
        value &= (1 << p.bits) - 1
    return struct.pack("<" + fmt, value)


def pack_args(entry: Entry, values) -> tuple[bytes, list[int]]:
    """Bytes of the whole parameter buffer, and each parameter's offset into it."""
    values = list(values)
    if len(values) != len(entry.params):
        names = ", ".join(p.name for p in entry.params)
        raise ArgumentError(f"kernel {entry.name} takes {len(entry.params)} arguments ({names}), got {len(values)}")
    buf = bytearray(entry.param_bytes)
    for i, (p, v) in enumerate(zip(entry.params, values)):
        raw = pack_value(entry, i, p, v)
        buf[p.offset : p.offset + len(raw)] = raw
    return bytes(buf), [p.offset for p in entry.params]


def unpack_args(entry: Entry, buf: bytes) -> list:
    """The inverse of pack_args for scalar parameters (used by the reference backend)."""
    out = []
    for p in entry.params:
        if p.count != 1:
            out.append(bytes(buf[p.offset : p.offset + p.size]))
        else:
            out.append(struct.unpack_from("<" + _FMT[(p.kind, p.bits)], buf, p.offset)[0])
    return out

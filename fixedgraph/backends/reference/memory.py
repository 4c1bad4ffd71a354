"""The reference backend's device memory: numpy byte buffers at stable fake addresses.

Addresses look like device pointers (large, 256-byte aligned, never 0) so that programs and
argument packing treat both backends alike. Every access is bounds-checked: a twin that indexes
past an allocation raises instead of silently reading a neighbour, which is how wrong indexing
is caught on the CPU before a kernel ever runs on the GPU.
"""
from __future__ import annotations

import bisect

import numpy as np

from fixedgraph.errors import FixedGraphError

_BASE = 0x7F00_0000_0000  # first fake address; looks like a device VA, far from 0
_GAP = 1 << 20  # unmapped bytes between allocations so off-by-a-lot reads fault


class MemoryFault(FixedGraphError):
    """A twin touched memory outside every allocation (the CPU twin of an illegal address)."""


class RefMemory:
    def __init__(self) -> None:
        self._starts: list[int] = []
        self._bufs: list[np.ndarray] = []  # uint8, one per allocation
        self._next = _BASE

    def alloc(self, nbytes: int) -> int:
        """Allocate ``nbytes`` (contents are garbage, like cuMemAlloc); returns the address."""
        if nbytes < 0:
            raise ValueError(f"cannot allocate {nbytes} bytes")
        addr = self._next
        buf = np.empty(max(int(nbytes), 1), dtype=np.uint8)
        buf[:] = 0xA5  # deterministic garbage: reads of unwritten memory show as odd values
        self._starts.append(addr)
        self._bufs.append(buf)
        self._next = (addr + buf.nbytes + _GAP + 255) // 256 * 256
        return addr

    def free(self, addr: int) -> None:
        i = bisect.bisect_left(self._starts, addr)
        if i == len(self._starts) or self._starts[i] != addr:
            raise MemoryFault(f"free of 0x{addr:x}, which is not the start of an allocation")
        del self._starts[i]
        del self._bufs[i]

    def _locate(self, addr: int, nbytes: int) -> tuple[np.ndarray, int]:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0:
            buf = self._bufs[i]
            off = addr - self._starts[i]
            if off + nbytes <= buf.nbytes:
                return buf, off
        raise MemoryFault(
            f"access of {nbytes} bytes at 0x{addr:x} lies outside every allocation"
            + (" (NULL pointer)" if addr == 0 else "")
        )

    def view(self, addr: int, dtype, count: int) -> np.ndarray:
        """A writable 1-D view of ``count`` elements of ``dtype`` at device address ``addr``."""
        dt = np.dtype(dtype)
        if addr % dt.itemsize:
            raise MemoryFault(f"misaligned {dt} access at 0x{addr:x}")
        buf, off = self._locate(addr, int(count) * dt.itemsize)
        return buf[off : off + int(count) * dt.itemsize].view(dt)

    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        raw = np.frombuffer(memoryview(np.ascontiguousarray(data)).cast("B"), dtype=np.uint8)
        self.view(addr, np.uint8, raw.nbytes)[:] = raw

    def read(self, addr: int, nbytes: int) -> bytes:
        return self.view(addr, np.uint8, nbytes).tobytes()

    def copy(self, dst: int, src: int, nbytes: int) -> None:
        self.view(dst, np.uint8, nbytes)[:] = self.view(src, np.uint8, nbytes)

    def memset(self, addr: int, byte: int, nbytes: int) -> None:
        self.view(addr, np.uint8, nbytes)[:] = byte

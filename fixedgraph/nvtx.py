"""NVTX ranges around host phases (boot, prefill, decode) for Nsight Systems; no-ops without NVTX.

Loads ``libnvToolsExt.so.1`` (from the CUDA toolkit or the nvidia-nvtx wheel) with ctypes when
present. Set FIXEDGRAPH_NVTX=0 to disable even then.
"""
from __future__ import annotations

import ctypes
import glob
import os
from contextlib import contextmanager

_lib = None


def _load():
    global _lib
    if _lib is not None or os.environ.get("FIXEDGRAPH_NVTX") == "0":
        return _lib or None
    candidates = ["libnvToolsExt.so.1", "libnvToolsExt.so"]
    try:
        import nvidia  # the nvidia-* wheels' namespace package

        for root in nvidia.__path__:
            candidates += glob.glob(os.path.join(root, "*", "lib", "libnvToolsExt.so*"))
    except ImportError:
        pass
    candidates += glob.glob("/usr/local/cuda*/lib64/libnvToolsExt.so*")
    for name in candidates:
        try:
            lib = ctypes.CDLL(name)
            lib.nvtxRangePushA.argtypes = [ctypes.c_char_p]
            _lib = lib
            return lib
        except OSError:
            continue
    _lib = False
    return None


def available() -> bool:
    return bool(_load())


@contextmanager
def range(name: str):
    """``with nvtx.range("prefill"): ...`` marks a host phase in an Nsight Systems timeline."""
    lib = _load()
    if lib:
        lib.nvtxRangePushA(name.encode())
    try:
        yield
    finally:
        if lib:
            lib.nvtxRangePop()

"""Numpy twins of the PTX kernels, registered by entry name.

A twin has the kernel's parameter list after three leading arguments:
``twin(mem, grid, block, *args)`` where ``mem`` is the reference arena (``mem.view(addr, dtype,
count)`` returns a writable 1-D numpy view of device memory), ``grid``/``block`` are 3-tuples,
and ``args`` follow the PTX ``.param`` order: pointers arrive as integer device addresses (0 for
NULL), integers as Python ints, floats as Python floats. A twin computes what the kernel computes
over the whole grid and writes its outputs through ``mem``. A twin whose result depends on the
launch's thread-block cluster declares a keyword-only ``cluster`` parameter (a 3-tuple).
"""
from __future__ import annotations

import importlib
import pkgutil
from typing import Callable

TWINS: dict[str, Callable] = {}


def twin(entry: str) -> Callable[[Callable], Callable]:
    """Register ``fn`` as the numpy twin of PTX entry ``entry``."""

    def register(fn: Callable) -> Callable:
        if entry in TWINS and TWINS[entry] is not fn:
            raise ValueError(f"two numpy twins registered for kernel entry {entry!r}")
        TWINS[entry] = fn
        return fn

    return register


def load_all() -> dict[str, Callable]:
    """Import every twin module in this package so that each registers its entries."""
    for info in pkgutil.iter_modules(__path__):
        importlib.import_module(f"{__name__}.{info.name}")
    return TWINS


def param_names(entry: str, count: int) -> list[str] | None:
    """The source-level parameter names of a kernel, read from its twin's signature."""
    import inspect

    fn = load_all().get(entry)
    if fn is None:
        return None
    names = [n for n, p in inspect.signature(fn).parameters.items() if p.kind == p.POSITIONAL_OR_KEYWORD][3:]
    return names if len(names) == count else None


def takes_cluster(fn: Callable) -> bool:
    """Whether twin ``fn`` is passed the launch's cluster dims (``cluster=`` keyword)."""
    import inspect

    p = inspect.signature(fn).parameters.get("cluster")
    return p is not None and p.kind == p.KEYWORD_ONLY

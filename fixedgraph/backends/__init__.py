"""Backends run programs: ``cuda`` on an NVIDIA GPU, ``reference`` on numpy."""
from __future__ import annotations

import os

from fixedgraph.errors import NoDevice


def get_device(kind: str | None = None, ordinal: int = 0):
    """``cuda``, ``reference`` or ``auto`` (CUDA when a GPU is usable, else reference).

    ``FIXEDGRAPH_BACKEND`` sets the default.
    """
    kind = (kind or os.environ.get("FIXEDGRAPH_BACKEND") or "auto").lower()
    if kind not in ("auto", "cuda", "reference"):
        raise ValueError(f"unknown backend {kind!r}; choose cuda, reference or auto")
    if kind in ("auto", "cuda"):
        try:
            from fixedgraph.backends.cuda import CudaDevice

            return CudaDevice(ordinal)
        except NoDevice:
            if kind == "cuda":
                raise
        except ImportError as exc:
            if kind == "cuda":
                raise NoDevice(f"the CUDA runtime extension is not built ({exc}); reinstall with "
                               "`pip install -e .`") from None
    from fixedgraph.backends.reference import ReferenceDevice

    return ReferenceDevice()

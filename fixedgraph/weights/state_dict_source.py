"""Weights held in memory: a dict of arrays or of torch tensors (a model already in Python).

Used to run fixedgraph on exactly the weights of a model built elsewhere (benchmarks against
PyTorch peers, tests against transformers) without writing a checkpoint first.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

import numpy as np

from fixedgraph import bf16
from fixedgraph.weights.source import WeightSource


def _to_bf16_bits(t: Any) -> np.ndarray:
    if isinstance(t, np.ndarray):
        return t if t.dtype == np.uint16 else bf16.from_f32(t.astype(np.float32))
    import torch  # only reached for torch tensors

    t = t.detach()
    if t.dtype != torch.bfloat16:
        t = t.to(torch.float32).to(torch.bfloat16)
    return t.contiguous().view(torch.int16).cpu().numpy().view(np.uint16)


class StateDictSource(WeightSource):
    """HF-named tensors from a mapping (numpy uint16 bf16 bits, float arrays, or torch tensors),
    converted one at a time on ``load``."""

    def __init__(self, tensors: Mapping[str, Any], name: str = "<state dict>") -> None:
        self.path = Path(name)
        self._tensors = dict(tensors)

    def names(self) -> list[str]:
        return list(self._tensors)

    def shape(self, name: str) -> tuple[int, ...]:
        if name not in self._tensors:
            raise self._missing(name)
        return tuple(int(d) for d in self._tensors[name].shape)

    def load(self, name: str) -> np.ndarray:
        if name not in self._tensors:
            raise self._missing(name)
        return _to_bf16_bits(self._tensors[name])

    def close(self) -> None:
        self._tensors = {}

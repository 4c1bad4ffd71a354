"""Weights stream into the arena one tensor at a time: host memory peaks near the largest tensor."""
import tracemalloc

import numpy as np

from fixedgraph.backends.reference import ReferenceDevice
from fixedgraph.loader import load_weights
from fixedgraph.models.config import ModelConfig
from fixedgraph.models.dense import DenseDecoder, Sizes
from fixedgraph.weights.source import expected_shapes
from fixedgraph.weights.state_dict_source import StateDictSource


class CountingSource(StateDictSource):
    """Makes each tensor only when asked (like a memory-mapped file) and counts the loads."""

    def __init__(self, shapes, rng):
        super().__init__({n: np.empty(s, np.uint16) for n, s in shapes.items()})
        self.shapes, self.rng, self.loads = shapes, rng, 0

    def load(self, name):
        self.loads += 1
        return self.rng.integers(0, 1 << 16, size=self.shapes[name], dtype=np.uint16)


def test_host_peak_is_near_the_largest_tensor(rng):
    cfg = ModelConfig(arch="llama", vocab_size=8000, hidden_size=512, intermediate_size=1376, num_layers=4,
                      num_heads=8, num_kv_heads=2)
    shapes = expected_shapes(cfg)
    model = DenseDecoder(cfg, Sizes((1,), (16,), 16, 8, 64, 16))
    dev = ReferenceDevice()
    arena = dev.arena(model.plan())
    src = CountingSource(shapes, rng)
    largest = max(int(np.prod(s)) * 2 for s in shapes.values())
    total = sum(int(np.prod(s)) * 2 for s in shapes.values())
    tracemalloc.start()
    tracemalloc.reset_peak()
    written = load_weights(model, src, arena, progress=False)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert written == total and src.loads == len(shapes)
    assert peak < 3 * largest + (4 << 20), f"peak {peak} vs largest tensor {largest} (model {total})"
    assert total > 4 * largest  # the bound above is meaningful: the model is much larger
    got = arena.read("L2.gate_up_w")
    assert got.shape == (2 * 1376, 512) and got.any()


def test_unsupported_head_dim_is_refused_clearly():
    import pytest

    from fixedgraph.errors import UnsupportedModel

    cfg = ModelConfig(arch="qwen3", vocab_size=100, hidden_size=64, intermediate_size=64, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=48)
    with pytest.raises(UnsupportedModel, match="head_dim 48 .*supported: 64, 96, 128"):
        DenseDecoder(cfg, Sizes((1,), (16,), 16, 8, 64, 16))

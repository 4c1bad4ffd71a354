"""Weight sources: safetensors and GGUF files read lazily, one tensor at a time, as bf16 bits."""
from fixedgraph.weights.source import WeightSource, expected_shapes, open_weights, validate

__all__ = ["WeightSource", "expected_shapes", "open_weights", "validate"]

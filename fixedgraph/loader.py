"""Stream a model's weights into the arena, one tensor at a time (host peak ~ largest tensor)."""
from __future__ import annotations

import os
import sys

import numpy as np

from fixedgraph.backends.base import Arena, write_rows
from fixedgraph.layout import dtype_of
from fixedgraph.models.dense import DenseDecoder
from fixedgraph.models.rope import rope_table
from fixedgraph.weights.source import WeightSource


def load_weights(model: DenseDecoder, source: WeightSource, arena: Arena, progress: bool | None = None) -> int:
    """Write every tensor the model needs into its region; returns the bytes written."""
    targets = model.weight_targets()
    if progress is None:
        progress = sys.stderr.isatty() and not os.environ.get("FIXEDGRAPH_NO_PROGRESS")
    names = list(targets)
    total = 0
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(names), desc="loading weights", unit="tensor", leave=False)
    for name in names:
        region, row = targets[name]
        tensor = source.load(name)  # bf16 bits in HF layout; the only host copy alive
        want = dtype_of(arena.plan[region].dtype)
        if tensor.dtype != want:
            raise TypeError(f"weight {name} loaded as {tensor.dtype}, region {region} holds {want}")
        write_rows(arena, region, row, tensor)
        total += tensor.nbytes
        del tensor
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    arena.write("rope", rope_table(model.cfg, model.sizes.max_model_len).astype(np.float32))
    for region, data in model.boot_tables(arena.plan).items():
        arena.write(region, data)
    return total

"""The WeightSource interface, the tensor list a model needs, and `open_weights`."""
from __future__ import annotations

from abc import ABC, abstractmethod
from pathlib import Path

import numpy as np

from fixedgraph.errors import WeightFileError
from fixedgraph.models.config import ModelConfig


class WeightSource(ABC):
    """Tensors of one checkpoint under Hugging Face names, in HF layout ([out, in] for linears).

    `load` returns one tensor at a time as bf16 bits (np.uint16) so peak host memory stays near the
    largest tensor; nothing is read before it is asked for.
    """

    path: Path

    @abstractmethod
    def names(self) -> list[str]:
        """Every tensor name the file holds that maps to an HF name."""

    @abstractmethod
    def shape(self, name: str) -> tuple[int, ...]:
        """HF-layout shape of `name`; WeightFileError if absent."""

    @abstractmethod
    def load(self, name: str) -> np.ndarray:
        """Read, dequantize and convert one tensor: HF layout, np.uint16 bf16 bits."""

    def has(self, name: str) -> bool:
        """True when the file holds `name`."""
        return name in set(self.names())

    def close(self) -> None:
        """Release file handles and maps; the source is unusable afterwards."""

    def __enter__(self) -> WeightSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _missing(self, name: str) -> WeightFileError:
        return WeightFileError(
            f"tensor {name!r} not found in {self.path}; the checkpoint is incomplete or is not "
            f"the architecture its config says")


def expected_shapes(cfg: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Every tensor the model needs, by HF name, with its HF-layout shape."""
    h, q, kv, ffn = cfg.hidden_size, cfg.q_size, cfg.kv_size, cfg.intermediate_size
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (cfg.vocab_size, h)}
    for i in range(cfg.num_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = (h,)
        out[p + "self_attn.q_proj.weight"] = (q, h)
        out[p + "self_attn.k_proj.weight"] = (kv, h)
        out[p + "self_attn.v_proj.weight"] = (kv, h)
        out[p + "self_attn.o_proj.weight"] = (h, q)
        if cfg.attention_bias:
            out[p + "self_attn.q_proj.bias"] = (q,)
            out[p + "self_attn.k_proj.bias"] = (kv,)
            out[p + "self_attn.v_proj.bias"] = (kv,)
        if cfg.qk_norm:
            out[p + "self_attn.q_norm.weight"] = (cfg.head_dim,)
            out[p + "self_attn.k_norm.weight"] = (cfg.head_dim,)
        out[p + "post_attention_layernorm.weight"] = (h,)
        out[p + "mlp.gate_proj.weight"] = (ffn, h)
        out[p + "mlp.up_proj.weight"] = (ffn, h)
        out[p + "mlp.down_proj.weight"] = (h, ffn)
    out["model.norm.weight"] = (h,)
    if not cfg.tie_word_embeddings:
        out["lm_head.weight"] = (cfg.vocab_size, h)
    return out


def validate(source: WeightSource, cfg: ModelConfig) -> None:
    """Check every needed tensor exists with the config's shape; raise WeightFileError naming all
    the problems. Reads headers only, so it runs before any device memory is allocated."""
    present = set(source.names())
    problems: list[str] = []
    for name, want in expected_shapes(cfg).items():
        if name not in present:
            problems.append(f"missing tensor {name!r}")
            continue
        found = source.shape(name)
        if tuple(found) != want:
            problems.append(f"tensor {name!r} has shape {tuple(found)}, config expects {want}")
    if problems:
        shown = "; ".join(problems[:8]) + (f"; and {len(problems) - 8} more" if len(problems) > 8 else "")
        raise WeightFileError(
            f"{source.path} does not match its config ({cfg.arch}, {cfg.num_layers} layers, hidden "
            f"{cfg.hidden_size}): {shown}")


def open_weights(path: str | Path) -> tuple[WeightSource, ModelConfig]:
    """Open an HF model directory (safetensors) or a .gguf file; return the validated source and
    its config. The caller owns the source and must close it (or use it as a context manager)."""
    from fixedgraph.weights.gguf_source import GGUFSource
    from fixedgraph.weights.safetensors_source import SafetensorsSource

    path = Path(path)
    if not path.exists():
        raise WeightFileError(f"{path} does not exist; pass an HF model directory or a .gguf file")
    source: WeightSource
    if path.is_dir():
        cfg = ModelConfig.from_hf_dir(path)
        source = SafetensorsSource(path)
    elif path.suffix == ".gguf":
        gguf_source = GGUFSource(path)
        source, cfg = gguf_source, gguf_source.config
    else:
        raise WeightFileError(
            f"{path} is neither a directory nor a .gguf file; pass an HF model directory "
            f"(config.json + *.safetensors) or a .gguf file")
    try:
        validate(source, cfg)
    except BaseException:
        source.close()
        raise
    return source, cfg

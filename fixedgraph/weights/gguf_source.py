"""GGUF weights (llama.cpp format), memory-mapped, renamed to HF names and dequantized per tensor."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFReader
from gguf.quants import dequantize

from fixedgraph import bf16
from fixedgraph.errors import FixedGraphError, UnsupportedModel, WeightFileError
from fixedgraph.models.config import ModelConfig
from fixedgraph.weights.source import WeightSource

_GLOBAL_NAMES = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_BLOCK_NAMES = {
    "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj", "attn_q_norm": "self_attn.q_norm",
    "attn_k_norm": "self_attn.k_norm", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj", "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
}
_BLOCK_RE = re.compile(r"blk\.(\d+)\.(\w+)\.(weight|bias)$")
# llama.cpp's converter permutes Q/K rows for these archs only (its rope kernel pairs adjacent
# dims); Qwen checkpoints are written unpermuted.
_PERMUTED_ARCHS = ("llama", "mistral")


def gguf_reader(reader_or_path: Any) -> GGUFReader:
    """Return an open GGUFReader; a path is opened memory-mapped with errors made readable."""
    if isinstance(reader_or_path, GGUFReader):
        return reader_or_path
    path = Path(reader_or_path)
    if not path.is_file():
        raise WeightFileError(f"GGUF file {path} does not exist")
    try:
        reader = GGUFReader(path)
    except Exception as e:  # the library raises ValueError, IndexError, struct errors, ...
        raise WeightFileError(
            f"{path} is not a readable GGUF file ({type(e).__name__}: {e}); it may be truncated "
            f"or not GGUF at all: re-download or re-convert it") from e
    size = path.stat().st_size
    for t in reader.tensors:
        # The reader maps tensor data lazily, so a cut-off file can still parse its header.
        if t.data_offset + t.n_bytes > size:
            raise WeightFileError(
                f"{path} is truncated: tensor {t.name} ends at byte {t.data_offset + t.n_bytes} "
                f"but the file has {size} bytes; re-download it")
    return reader


def gguf_value(reader: GGUFReader, key: str) -> Any:
    """A metadata value as a Python scalar/str/list, or None when the key is absent."""
    field = reader.get_field(key)
    return None if field is None else field.contents()


def gguf_scaling(reader: GGUFReader, arch: str) -> dict | None:
    """RoPE scaling from GGUF metadata, in the normalized HF form ModelConfig keeps."""
    kind = gguf_value(reader, f"{arch}.rope.scaling.type")
    factor = gguf_value(reader, f"{arch}.rope.scaling.factor")
    if kind == "linear":
        return {"rope_type": "linear", "factor": float(factor)}
    if kind == "yarn":
        orig = gguf_value(reader, f"{arch}.rope.scaling.original_context_length")
        return {"rope_type": "yarn", "factor": float(factor),
                "original_max_position_embeddings": int(orig) if orig else None}
    if kind not in (None, "none"):
        raise UnsupportedModel(f"GGUF rope scaling type {kind!r} is not supported")
    for t in reader.tensors:
        # Llama 3.1 GGUFs carry their rope scaling as per-pair frequency divisors.
        if t.name == "rope_freqs.weight":
            return {"rope_type": "gguf_freq_factors",
                    "factors": [float(x) for x in np.asarray(t.data, dtype=np.float32).ravel()]}
    return None


def hf_name(gguf_name: str) -> str | None:
    """HF name of a GGUF tensor, or None for tensors the model does not use (e.g. rope_freqs)."""
    if gguf_name in _GLOBAL_NAMES:
        return _GLOBAL_NAMES[gguf_name]
    m = _BLOCK_RE.match(gguf_name)
    if m is None or m.group(2) not in _BLOCK_NAMES:
        return None
    return f"model.layers.{m.group(1)}.{_BLOCK_NAMES[m.group(2)]}.{m.group(3)}"


def unpermute_qk(w: np.ndarray, num_heads: int) -> np.ndarray:
    """Undo llama.cpp's Q/K row permutation: [heads*head_dim, ...] in any dtype.

    The converter reorders each head's rows from (half, pair) to (pair, half) so that rotated
    pairs sit next to each other; swapping the two axes back restores HF's rotate_half order.
    """
    rows = w.shape[0]
    return (w.reshape(num_heads, rows // num_heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


class GGUFSource(WeightSource):
    """A memory-mapped .gguf file; `config` is read from its metadata."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.reader: GGUFReader | None = gguf_reader(self.path)
        self.config = ModelConfig.from_gguf(self.reader)
        self._tensors = {}
        for t in self.reader.tensors:
            name = hf_name(t.name)
            if name is not None:
                self._tensors[name] = t

    def names(self) -> list[str]:
        return list(self._tensors)

    def has(self, name: str) -> bool:
        return name in self._tensors

    def shape(self, name: str) -> tuple[int, ...]:
        t = self._tensor(name)
        # GGUF lists dims fastest-first (ggml ne[]); numpy and HF order is the reverse.
        return tuple(int(d) for d in reversed(t.shape.tolist()))

    def load(self, name: str) -> np.ndarray:
        t = self._tensor(name)
        shape = self.shape(name)
        qtype = t.tensor_type
        if qtype == GGMLQuantizationType.BF16:
            # Exact: the bytes already are bf16 bits.
            out = np.ascontiguousarray(t.data).view("<u2").reshape(shape).astype(np.uint16)
        else:
            try:
                f32 = dequantize(t.data, qtype)  # [*shape] f32
            except NotImplementedError as e:
                raise UnsupportedModel(
                    f"tensor {t.name} in {self.path} has type {qtype.name}, which the gguf library "
                    f"cannot dequantize; re-quantize the model (e.g. Q8_0 or Q4_K)") from e
            out = bf16.from_f32(np.asarray(f32, dtype=np.float32).reshape(shape))
        if self.config.arch in _PERMUTED_ARCHS:
            if ".self_attn.q_proj." in name:
                out = unpermute_qk(out, self.config.num_heads)
            elif ".self_attn.k_proj." in name:
                out = unpermute_qk(out, self.config.num_kv_heads)
        return np.ascontiguousarray(out)  # [*shape] bf16 bits

    def close(self) -> None:
        # Dropping the reader drops its np.memmap; the OS unmaps once no view remains.
        self.reader = None
        self._tensors = {}

    def _tensor(self, name: str) -> Any:
        if self.reader is None:
            raise FixedGraphError(f"{self.path} is closed")
        t = self._tensors.get(name)
        if t is None:
            raise self._missing(name)
        return t

"""ModelConfig: the few numbers a dense decoder family needs, read from HF config.json or GGUF."""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fixedgraph.errors import UnsupportedModel, WeightFileError

SUPPORTED_ARCHS = ("llama", "mistral", "qwen2", "qwen3")

# HF `architectures[0]` and `model_type` -> our arch. SmolLM/SmolLM2 checkpoints are plain llama.
_HF_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
    "Qwen3ForCausalLM": "qwen3",
}
_HF_MODEL_TYPES = {
    "llama": "llama", "smollm": "llama", "smollm2": "llama",
    "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3",
}
# GGUF `general.architecture` -> our arch (llama.cpp converts Mistral checkpoints as "llama").
_GGUF_ARCHS = {"llama": "llama", "mistral": "mistral", "qwen2": "qwen2", "qwen3": "qwen3"}

_SUPPORTED_MSG = (
    "supported: LlamaForCausalLM (incl. SmolLM/SmolLM2), MistralForCausalLM, "
    "Qwen2ForCausalLM, Qwen3ForCausalLM"
)


@dataclass(slots=True)
class ModelConfig:
    """Shape and numerics of one dense decoder-only model; validated on construction."""

    arch: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int = 0  # 0 -> hidden_size // num_heads (Qwen3 sets its own)
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    rope_scaling: dict | None = None  # normalized: always has "rope_type"
    max_position_embeddings: int = 2048
    tie_word_embeddings: bool = False
    attention_bias: bool | None = None  # None -> the arch's default (True only for qwen2)
    qk_norm: bool | None = None  # None -> the arch's default (True only for qwen3)
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.arch not in SUPPORTED_ARCHS:
            raise UnsupportedModel(f"architecture {self.arch!r} is not supported; {_SUPPORTED_MSG}")
        if self.head_dim == 0:
            self.head_dim = self.hidden_size // self.num_heads
        if self.attention_bias is None:
            self.attention_bias = self.arch == "qwen2"
        if self.qk_norm is None:
            self.qk_norm = self.arch == "qwen3"
        self.eos_token_ids = tuple(int(t) for t in self.eos_token_ids)
        self.rope_scaling = normalize_rope_scaling(self.rope_scaling)
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim", "max_position_embeddings"):
            assert getattr(self, name) > 0, f"{name} must be positive, got {getattr(self, name)}"
        assert self.num_heads % self.num_kv_heads == 0, (
            f"num_heads {self.num_heads} is not a multiple of num_kv_heads {self.num_kv_heads}")
        # NeoX-style rotation pairs (i, i + head_dim/2), so head_dim must be even.
        assert self.head_dim % 2 == 0, f"head_dim must be even, got {self.head_dim}"
        assert self.rms_norm_eps > 0 and self.rope_theta > 0

    @property
    def q_size(self) -> int:
        """Width of the Q projection output: num_heads * head_dim."""
        return self.num_heads * self.head_dim

    @property
    def kv_size(self) -> int:
        """Width of each of the K and V projection outputs: num_kv_heads * head_dim."""
        return self.num_kv_heads * self.head_dim

    @classmethod
    def from_hf_dict(cls, d: dict[str, Any]) -> ModelConfig:
        """Build from a parsed Hugging Face config.json."""
        arch = _hf_arch(d)
        if d.get("hidden_act", "silu") != "silu":
            raise UnsupportedModel(f"hidden_act {d['hidden_act']!r} is not supported (only silu)")
        if d.get("mlp_bias", False):
            raise UnsupportedModel("mlp_bias=true is not supported (MLP projections have no bias)")
        max_pos = int(d.get("max_position_embeddings", 2048))
        _check_sliding_window(arch, d, max_pos)
        # transformers >= 5 saves rope_theta inside rope_parameters; older configs keep it on top.
        rope_params = dict(d.get("rope_parameters") or {})
        theta = d.get("rope_theta", rope_params.pop("rope_theta", 10000.0))
        rope_params.pop("partial_rotary_factor", None)
        scaling = d.get("rope_scaling") or rope_params or None
        if d.get("partial_rotary_factor", 1.0) != 1.0:
            raise UnsupportedModel("partial_rotary_factor != 1 is not supported")
        eos = d.get("eos_token_id")
        heads = int(d["num_attention_heads"])
        return cls(
            arch=arch,
            vocab_size=int(d["vocab_size"]),
            hidden_size=int(d["hidden_size"]),
            intermediate_size=int(d["intermediate_size"]),
            num_layers=int(d["num_hidden_layers"]),
            num_heads=heads,
            num_kv_heads=int(d.get("num_key_value_heads") or heads),
            # HF Qwen3Config defaults head_dim to 128, not hidden // heads.
            head_dim=int(d.get("head_dim") or (128 if arch == "qwen3" else 0)),
            rms_norm_eps=float(d.get("rms_norm_eps", 1e-6)),
            rope_theta=float(theta),
            rope_scaling=scaling,
            max_position_embeddings=max_pos,
            tie_word_embeddings=bool(d.get("tie_word_embeddings", False)),
            # Qwen2 hard-codes q/k/v bias; the others read attention_bias (default False).
            attention_bias=True if arch == "qwen2" else bool(d.get("attention_bias", False)),
            qk_norm=arch == "qwen3",
            bos_token_id=d.get("bos_token_id"),
            eos_token_ids=_as_ids(eos),
        )

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> ModelConfig:
        """Build from a model directory's config.json, adding generation_config.json's eos ids."""
        path = Path(path)
        d = _read_json(path / "config.json")
        cfg = cls.from_hf_dict(d)
        gen_path = path / "generation_config.json"
        if gen_path.is_file():
            gen = _read_json(gen_path)
            # generation_config's eos list is what HF's generate() stops on; keep config's too.
            extra = [t for t in _as_ids(gen.get("eos_token_id")) if t not in cfg.eos_token_ids]
            cfg.eos_token_ids = cfg.eos_token_ids + tuple(extra)
            if cfg.bos_token_id is None and gen.get("bos_token_id") is not None:
                cfg.bos_token_id = int(gen["bos_token_id"])
        return cfg

    @classmethod
    def from_gguf(cls, reader_or_path: Any) -> ModelConfig:
        """Build from a GGUF file's metadata (a path or an open `gguf.GGUFReader`)."""
        from fixedgraph.weights.gguf_source import gguf_reader, gguf_scaling, gguf_value

        reader = gguf_reader(reader_or_path)
        gguf_arch = gguf_value(reader, "general.architecture")
        if gguf_arch not in _GGUF_ARCHS:
            raise UnsupportedModel(
                f"GGUF architecture {gguf_arch!r} is not supported; supported GGUF architectures: "
                f"{', '.join(_GGUF_ARCHS)}")

        def key(name: str, default: Any = KeyError) -> Any:
            v = gguf_value(reader, f"{gguf_arch}.{name}")
            if v is None:
                if default is KeyError:
                    raise WeightFileError(f"GGUF metadata key {gguf_arch}.{name} is missing")
                return default
            return v

        tokens = reader.get_field("tokenizer.ggml.tokens")
        vocab = len(tokens.data) if tokens is not None else key("vocab_size")
        tensor_names = {t.name for t in reader.tensors}
        heads = int(key("attention.head_count"))
        eos = gguf_value(reader, "tokenizer.ggml.eos_token_id")
        eot = gguf_value(reader, "tokenizer.ggml.eot_token_id")
        arch = _GGUF_ARCHS[gguf_arch]
        return cls(
            arch=arch,
            vocab_size=int(vocab),
            hidden_size=int(key("embedding_length")),
            intermediate_size=int(key("feed_forward_length")),
            num_layers=int(key("block_count")),
            num_heads=heads,
            num_kv_heads=int(key("attention.head_count_kv", heads)),
            head_dim=int(key("attention.key_length", 0)),
            rms_norm_eps=float(key("attention.layer_norm_rms_epsilon")),
            rope_theta=float(key("rope.freq_base", 10000.0)),
            rope_scaling=gguf_scaling(reader, gguf_arch),
            max_position_embeddings=int(key("context_length")),
            tie_word_embeddings="output.weight" not in tensor_names,
            attention_bias="blk.0.attn_q.bias" in tensor_names,
            qk_norm="blk.0.attn_q_norm.weight" in tensor_names,
            bos_token_id=gguf_value(reader, "tokenizer.ggml.bos_token_id"),
            eos_token_ids=tuple(dict.fromkeys(t for t in (eos, eot) if t is not None)),
        )


def normalize_rope_scaling(scaling: dict | None) -> dict | None:
    """HF writes the type as "type" (old) or "rope_type" (new); keep one key, None for default."""
    if not scaling:
        return None
    out = dict(scaling)
    rope_type = out.pop("type", None)
    out.setdefault("rope_type", rope_type or "default")
    if out["rope_type"] == "default" and len(out) == 1:
        return None
    return out


def _hf_arch(d: dict[str, Any]) -> str:
    names = d.get("architectures") or []
    for name in names:
        if name in _HF_ARCHITECTURES:
            return _HF_ARCHITECTURES[name]
    model_type = d.get("model_type")
    if not names and model_type in _HF_MODEL_TYPES:
        return _HF_MODEL_TYPES[model_type]
    raise UnsupportedModel(
        f"model architectures={names} model_type={model_type!r} is not supported; {_SUPPORTED_MSG}")


def _check_sliding_window(arch: str, d: dict[str, Any], max_pos: int) -> None:
    window = d.get("sliding_window")
    # Qwen2/3 configs carry a window that only applies when use_sliding_window is true.
    if arch in ("qwen2", "qwen3") and not d.get("use_sliding_window", False):
        return
    if window is not None and int(window) < max_pos:
        raise UnsupportedModel(
            f"sliding-window attention (window {window} < max_position_embeddings {max_pos}) is not "
            f"supported; use a checkpoint without a window (e.g. Mistral v0.2+) or set "
            f"max_position_embeddings <= {window} in config.json to cap the context")


def _as_ids(v: Any) -> tuple[int, ...]:
    if v is None:
        return ()
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v)
    return (int(v),)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise WeightFileError(f"{path} not found; a Hugging Face model directory needs config.json")
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightFileError(f"{path} is not valid JSON ({e}); re-download it") from e

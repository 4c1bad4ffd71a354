"""Random-weight Hugging Face models of known shapes, built with transformers.

Weights are drawn in float32 and rounded to bf16 before anything uses them, so a float32
transformers run and fixedgraph's bf16 run start from identical parameter values.
"""
from __future__ import annotations

from pathlib import Path

# name -> (transformers config class, kwargs). Tiny configs cover every family feature:
# llama3 rope scaling, QKV bias, QK-norm with an independent head_dim, tied/untied heads, GQA
# ratios, and sizes that are not multiples of 64/128.
CONFIGS: dict[str, tuple[str, dict]] = {
    "tiny-llama": ("LlamaConfig", dict(
        vocab_size=1000, hidden_size=256, intermediate_size=688, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 64}, tie_word_embeddings=False)),
    "tiny-qwen2": ("Qwen2Config", dict(
        vocab_size=1000, hidden_size=192, intermediate_size=520, num_hidden_layers=2, num_attention_heads=3,
        num_key_value_heads=1, max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, use_sliding_window=False)),
    "tiny-qwen3": ("Qwen3Config", dict(
        vocab_size=1000, hidden_size=200, intermediate_size=400, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=128, max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=False, use_sliding_window=False)),
    # hidden and intermediate sizes that are no multiple of 8: the GEMVs' scalar paths and the
    # unfused head (final norm + lm_head, then argmax_rows)
    "tiny-odd": ("Qwen3Config", dict(
        vocab_size=999, hidden_size=100, intermediate_size=260, num_hidden_layers=2, num_attention_heads=3,
        num_key_value_heads=1, head_dim=64, max_position_embeddings=1024, rms_norm_eps=1e-6, rope_theta=1e4,
        tie_word_embeddings=True, use_sliding_window=False)),
    "tiny-mistral": ("MistralConfig", dict(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=1, max_position_embeddings=1024, rms_norm_eps=1e-5, sliding_window=None,
        tie_word_embeddings=False)),
    # long contexts against transformers: 8B's GQA ratio (4) and head_dim (128), QK-norm, a
    # context far past the other tiny configs' 1024 positions
    "tiny-long": ("Qwen3Config", dict(
        vocab_size=1000, hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=8,
        num_key_value_heads=2, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=False, use_sliding_window=False)),
    "qwen3-0.6b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3-8b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=4096, intermediate_size=12288, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=False, use_sliding_window=False)),
    "llama3-8b": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=500000.0,
        tie_word_embeddings=False)),
    # More public models' shapes (from their config.json; random weights here): the launch plans
    # of other widths, GQA ratios and head dims (tests/host/test_model_shapes.py), and benches.
    "qwen2.5-0.5b": ("Qwen2Config", dict(
        vocab_size=151936, hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
        num_key_value_heads=2, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, use_sliding_window=False)),
    "qwen2.5-7b": ("Qwen2Config", dict(
        vocab_size=152064, hidden_size=3584, intermediate_size=18944, num_hidden_layers=28, num_attention_heads=28,
        num_key_value_heads=4, max_position_embeddings=32768, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=False, use_sliding_window=False)),
    "llama3.2-1b": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=2048, intermediate_size=8192, num_hidden_layers=16, num_attention_heads=32,
        num_key_value_heads=8, head_dim=64, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}, tie_word_embeddings=True)),
    "llama3.2-3b": ("LlamaConfig", dict(
        vocab_size=128256, hidden_size=3072, intermediate_size=8192, num_hidden_layers=28, num_attention_heads=24,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=131072, rms_norm_eps=1e-5, rope_theta=500000.0,
        rope_scaling={"rope_type": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                      "original_max_position_embeddings": 8192}, tie_word_embeddings=True)),
    "mistral-7b": ("MistralConfig", dict(
        vocab_size=32768, hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
        num_key_value_heads=8, max_position_embeddings=32768, rms_norm_eps=1e-5, rope_theta=1e6, sliding_window=None,
        tie_word_embeddings=False)),
    "qwen3-4b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=True, use_sliding_window=False)),
    "qwen3-14b": ("Qwen3Config", dict(
        vocab_size=151936, hidden_size=5120, intermediate_size=17408, num_hidden_layers=40, num_attention_heads=40,
        num_key_value_heads=8, head_dim=128, max_position_embeddings=40960, rms_norm_eps=1e-6, rope_theta=1e6,
        tie_word_embeddings=False, use_sliding_window=False)),
    # head dim 64 with GQA 3 over 5 kv heads (SmolLM2-360M, the base model's config.json)
    "smollm2-360m": ("LlamaConfig", dict(
        vocab_size=49152, hidden_size=960, intermediate_size=2560, num_hidden_layers=32, num_attention_heads=15,
        num_key_value_heads=5, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=100000.0,
        tie_word_embeddings=True)),
    "smollm2-1.7b": ("LlamaConfig", dict(
        vocab_size=49152, hidden_size=2048, intermediate_size=8192, num_hidden_layers=24, num_attention_heads=32,
        num_key_value_heads=32, max_position_embeddings=8192, rms_norm_eps=1e-5, rope_theta=130000.0,
        tie_word_embeddings=True)),
}


def hf_config(name: str, **overrides):
    import transformers

    cls_name, kwargs = CONFIGS[name]
    kwargs = {**kwargs, "initializer_range": 0.02, **overrides}
    return getattr(transformers, cls_name)(**kwargs)


def cast_model(model, dtype):
    """``model.to(dtype)`` that keeps the rotary embeddings' inverse frequencies (the ``inv_freq``
    buffers) as they were, in float32. ``Module.to`` casts every floating buffer: in bf16,
    1e6 ** (-2/128) = 0.80584... becomes 0.8046875, so every rotation angle is off by a relative
    1e-3 and by a tenth of a radian after a few hundred positions, and a float32 model cast to bf16
    and back keeps those angles. transformers computes the angles from ``inv_freq`` in float32
    (cos / sin are cast afterwards), as fixedgraph's table does in float64, so a reference built
    with plain ``.to`` disagrees with a correct implementation more the longer the context."""
    import torch

    keep = {n: b.detach().clone().float() for n, b in model.named_buffers() if n.endswith("inv_freq")}
    model.to(dtype)
    for n, b in keep.items():
        mod, _, leaf = n.rpartition(".")
        owner = model.get_submodule(mod) if mod else model
        owner._buffers[leaf] = b.to(owner._buffers[leaf].device)
    return model


def random_model(name: str, seed: int = 0, device: str = "cpu", dtype: str = "float32",
                 embed_std: float = 0.25):
    """A transformers model of config ``name`` with random weights rounded to bf16.

    Embedding and head rows get std ``embed_std`` (the rest transformers' 0.02): logits then
    have clear margins, as a trained model's do, instead of the near-ties of a fresh init, and
    small float differences do not flip greedy picks or grow chaotically through the layers.
    """
    import torch
    from transformers import AutoModelForCausalLM

    cfg = hf_config(name)
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    with torch.no_grad():
        for emb in {id(m.weight): m.weight for m in (model.get_input_embeddings(), model.get_output_embeddings())}.values():
            emb.normal_(0.0, embed_std)
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).to(torch.float32))
            if p.ndim == 1:  # norm weights: around 1, not exactly 1, so a missing norm shows
                p.copy_((1.0 + 0.1 * torch.randn_like(p)).to(torch.bfloat16).to(torch.float32))
    return cast_model(model, getattr(torch, dtype)).eval()


def random_llm(name: str, seed: int = 0, backend: str = "cuda", max_model_len: int = 256,
               prefill_chunk: int = 256, lift_positions: bool = False, **llm_kwargs):
    """An engine over ``random_model(name, seed)``'s bf16 weights, handed over in memory (no
    checkpoint on disk). ``lift_positions``: raise the config's position limit to
    ``max_model_len`` (the small test configs stop at 1024)."""
    import dataclasses

    from fixedgraph.engine import LLM
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.weights.state_dict_source import StateDictSource

    hf = random_model(name, seed, device="cuda" if backend == "cuda" else "cpu", dtype="bfloat16")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    if lift_positions and cfg.max_position_embeddings < max_model_len:
        cfg = dataclasses.replace(cfg, max_position_embeddings=max_model_len)
    return LLM(weights=(StateDictSource(hf.state_dict(), name), cfg), backend=backend, max_model_len=max_model_len,
               prefill_chunk=prefill_chunk, progress=False, **llm_kwargs)


def save_checkpoint(name: str, out_dir: str | Path, seed: int = 0) -> Path:
    """Write a random-weight bf16 safetensors checkpoint (config.json + model.safetensors)."""
    import torch

    out = Path(out_dir)
    model = random_model(name, seed)
    cast_model(model, torch.bfloat16).save_pretrained(out, safe_serialization=True)
    return out

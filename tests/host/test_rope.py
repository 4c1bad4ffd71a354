"""RoPE frequencies and tables against transformers' rotary embedding classes."""
from __future__ import annotations

import numpy as np
import pytest

from fixedgraph.errors import UnsupportedModel
from fixedgraph.models.config import ModelConfig
from fixedgraph.models.rope import apply_rope, attention_factor, inv_freq, rope_table

SCALINGS = {
    "default": None,
    "linear": {"rope_type": "linear", "factor": 4.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
               "original_max_position_embeddings": 1024},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
    "yarn_mscale": {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 512,
                    "mscale": 0.707, "mscale_all_dim": 1.0, "beta_fast": 16},
    "yarn_attn": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 2048,
                  "attention_factor": 1.3},
}


def _cfg(scaling: dict | None, head_dim: int = 64, theta: float = 500000.0) -> ModelConfig:
    return ModelConfig(arch="llama", vocab_size=100, hidden_size=256, intermediate_size=512,
                       num_layers=1, num_heads=4, num_kv_heads=2, head_dim=head_dim, rope_theta=theta,
                       rope_scaling=scaling, max_position_embeddings=4096)


def test_default_matches_closed_form():
    cfg = _cfg(None, head_dim=32, theta=10000.0)
    i = np.arange(16)
    np.testing.assert_allclose(inv_freq(cfg), 10000.0 ** (-2 * i / 32), rtol=1e-14)
    table = rope_table(cfg, 100)
    assert table.shape == (100, 16, 2) and table.dtype == np.float32
    np.testing.assert_allclose(table[37, 5], [np.cos(37 * inv_freq(cfg)[5]), np.sin(37 * inv_freq(cfg)[5])],
                               atol=1e-7)
    lin = _cfg(SCALINGS["linear"], head_dim=32, theta=10000.0)
    np.testing.assert_allclose(inv_freq(lin), inv_freq(cfg) / 4.0)


def test_unsupported_types_raise():
    for kind in ("dynamic", "longrope"):
        with pytest.raises(UnsupportedModel, match=kind):
            inv_freq(_cfg({"rope_type": kind, "factor": 2.0}))


@pytest.mark.parametrize("name", list(SCALINGS))
def test_matches_transformers(name):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = _cfg(SCALINGS[name])
    params = dict(SCALINGS[name] or {"rope_type": "default"}, rope_theta=cfg.rope_theta)
    hf_cfg = transformers.LlamaConfig(hidden_size=256, num_attention_heads=4, num_key_value_heads=2,
                                      head_dim=64, max_position_embeddings=4096, rope_parameters=params)
    rot = LlamaRotaryEmbedding(hf_cfg)
    np.testing.assert_allclose(inv_freq(cfg), rot.inv_freq.double().numpy(), rtol=2e-6)
    assert attention_factor(cfg) == pytest.approx(rot.attention_scaling, rel=1e-12)
    if name.startswith("yarn"):
        assert attention_factor(cfg) != 1.0  # the scaled case is really exercised

    positions = torch.arange(2048)[None, :]
    x = torch.zeros(1, 2048, 64, dtype=torch.float32)
    cos, sin = rot(x, positions)  # [1, P, head_dim], halves duplicated (rotate_half layout)
    table = rope_table(cfg, 2048)
    # HF computes angles in float32, so large positions carry ~pos * 6e-8 rad of error.
    np.testing.assert_allclose(table[..., 0], cos[0, :, :32].numpy(), atol=3e-4)
    np.testing.assert_allclose(table[..., 1], sin[0, :, :32].numpy(), atol=3e-4)
    np.testing.assert_array_equal(cos[0, :, :32].numpy(), cos[0, :, 32:].numpy())


def test_apply_rope_matches_hf_rotate_half():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = _cfg(SCALINGS["llama3"], head_dim=128, theta=1e6)  # Qwen3-like head_dim
    rng = np.random.default_rng()
    q = rng.standard_normal((5, 3, 128)).astype(np.float32)  # [tokens, heads, head_dim]
    pos = rng.integers(0, 500, size=5)
    table = rope_table(cfg, 500)
    ours = apply_rope(q, pos, table)
    cos = np.concatenate([table[pos, :, 0]] * 2, axis=-1)  # [tokens, head_dim]
    sin = np.concatenate([table[pos, :, 1]] * 2, axis=-1)
    qt = torch.from_numpy(q).transpose(0, 1)[None]  # [1, heads, tokens, head_dim]
    ref, _ = apply_rotary_pos_emb(qt, qt, torch.from_numpy(cos)[None], torch.from_numpy(sin)[None])
    np.testing.assert_allclose(ours, ref[0].transpose(0, 1).numpy(), atol=1e-5)

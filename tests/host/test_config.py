"""ModelConfig from HF config dicts/dirs and GGUF metadata."""
from __future__ import annotations

import json

import gguf
import numpy as np
import pytest

from fixedgraph.errors import UnsupportedModel, WeightFileError
from fixedgraph.models.config import ModelConfig

SMOLLM2_135M = {  # SmolLM2-135M-Instruct's config.json (abridged)
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "rms_norm_eps": 1e-5, "rope_theta": 100000,
    "rope_scaling": None, "max_position_embeddings": 8192, "tie_word_embeddings": True,
    "bos_token_id": 1, "eos_token_id": 2,
}


def test_smollm2_is_llama():
    cfg = ModelConfig.from_hf_dict(SMOLLM2_135M)
    assert (cfg.arch, cfg.head_dim, cfg.num_kv_heads, cfg.rope_theta) == ("llama", 64, 3, 1e5)
    assert cfg.tie_word_embeddings and not cfg.attention_bias and not cfg.qk_norm
    assert cfg.eos_token_ids == (2,) and cfg.bos_token_id == 1
    assert (cfg.q_size, cfg.kv_size) == (576, 192)


def test_qwen2_has_bias_and_qwen3_has_qk_norm_and_own_head_dim():
    base = dict(SMOLLM2_135M, architectures=None, num_attention_heads=16, num_key_value_heads=8,
                hidden_size=1024, sliding_window=4096, use_sliding_window=False)
    qwen2 = ModelConfig.from_hf_dict(dict(base, model_type="qwen2"))
    assert qwen2.arch == "qwen2" and qwen2.attention_bias and not qwen2.qk_norm
    qwen3 = ModelConfig.from_hf_dict(dict(base, architectures=["Qwen3ForCausalLM"], head_dim=128))
    assert qwen3.arch == "qwen3" and qwen3.qk_norm and not qwen3.attention_bias
    assert qwen3.head_dim == 128 and qwen3.q_size == 2048  # != hidden_size


def test_unsupported_architecture_lists_supported():
    with pytest.raises(UnsupportedModel, match="Qwen3ForCausalLM") as e:
        ModelConfig.from_hf_dict(dict(SMOLLM2_135M, architectures=["GPTNeoXForCausalLM"]))
    assert "GPTNeoXForCausalLM" in str(e.value)
    with pytest.raises(UnsupportedModel, match="LlamaForCausalLM"):
        ModelConfig.from_hf_dict(dict(SMOLLM2_135M, architectures=[], model_type="gemma"))


def test_mistral_sliding_window():
    d = dict(SMOLLM2_135M, architectures=["MistralForCausalLM"], max_position_embeddings=32768)
    with pytest.raises(UnsupportedModel, match="sliding-window.*4096 < max_position_embeddings 32768"):
        ModelConfig.from_hf_dict(dict(d, sliding_window=4096))
    assert ModelConfig.from_hf_dict(dict(d, sliding_window=None)).arch == "mistral"
    assert ModelConfig.from_hf_dict(dict(d, sliding_window=32768)).arch == "mistral"


def test_rope_scaling_forms_normalize():
    old = ModelConfig.from_hf_dict(dict(SMOLLM2_135M, rope_scaling={"type": "linear", "factor": 2.0}))
    assert old.rope_scaling == {"rope_type": "linear", "factor": 2.0}
    # transformers >= 5 writes theta inside rope_parameters.
    new = ModelConfig.from_hf_dict({k: v for k, v in SMOLLM2_135M.items() if k != "rope_theta"} | {
        "rope_parameters": {"rope_type": "default", "rope_theta": 5e5}})
    assert new.rope_theta == 5e5 and new.rope_scaling is None


def test_invariants_are_checked():
    with pytest.raises(AssertionError, match="multiple of num_kv_heads"):
        ModelConfig.from_hf_dict(dict(SMOLLM2_135M, num_key_value_heads=4))


def test_from_hf_dir_merges_generation_eos(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(SMOLLM2_135M))
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [2, 0]}))
    assert ModelConfig.from_hf_dir(tmp_path).eos_token_ids == (2, 0)
    with pytest.raises(WeightFileError, match="config.json"):
        ModelConfig.from_hf_dir(tmp_path / "nope")


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
def test_matches_transformers_config_classes(arch, tmp_path):
    transformers = pytest.importorskip("transformers")
    cls = {"llama": transformers.LlamaConfig, "mistral": transformers.MistralConfig,
           "qwen2": transformers.Qwen2Config, "qwen3": transformers.Qwen3Config}[arch]
    rng = np.random.default_rng()
    heads = int(rng.choice([4, 8]))
    hf = cls(vocab_size=int(rng.integers(100, 1000)), hidden_size=heads * 32, intermediate_size=96,
             num_hidden_layers=3, num_attention_heads=heads, num_key_value_heads=2, head_dim=48,
             max_position_embeddings=4096, sliding_window=None, tie_word_embeddings=True,
             eos_token_id=[5, 7])
    hf.save_pretrained(tmp_path)
    cfg = ModelConfig.from_hf_dir(tmp_path)
    assert cfg.arch == arch
    assert (cfg.vocab_size, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.num_layers) == (
        hf.vocab_size, hf.hidden_size, hf.num_attention_heads, hf.num_key_value_heads, hf.num_hidden_layers)
    assert cfg.head_dim == hf.head_dim == 48
    assert cfg.rope_theta == hf.rope_parameters["rope_theta"] and cfg.rms_norm_eps == hf.rms_norm_eps
    assert cfg.eos_token_ids == (5, 7) and cfg.tie_word_embeddings


def test_from_gguf_metadata(tmp_path):
    path = tmp_path / "m.gguf"
    w = gguf.GGUFWriter(str(path), "qwen3")
    for key, val in [("block_count", 2), ("embedding_length", 64), ("feed_forward_length", 96),
                     ("attention.head_count", 4), ("attention.head_count_kv", 2),
                     ("attention.key_length", 32), ("context_length", 1024)]:
        w.add_uint32(f"qwen3.{key}", val)
    w.add_float32("qwen3.attention.layer_norm_rms_epsilon", 1e-6)
    w.add_float32("qwen3.rope.freq_base", 1e6)
    w.add_token_list([f"t{i}" for i in range(77)])
    w.add_uint32("tokenizer.ggml.eos_token_id", 5)
    w.add_tensor("blk.0.attn_q_norm.weight", np.ones(32, np.float32))
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()
    cfg = ModelConfig.from_gguf(path)
    assert (cfg.arch, cfg.vocab_size, cfg.head_dim, cfg.num_kv_heads, cfg.rope_theta) == (
        "qwen3", 77, 32, 2, 1e6)
    assert cfg.tie_word_embeddings and cfg.qk_norm and cfg.eos_token_ids == (5,)

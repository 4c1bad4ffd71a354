"""SafetensorsSource: single file and shards, f32/f16/bf16, and every malformed case."""
from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from safetensors.numpy import save_file

from fixedgraph import bf16
from fixedgraph.errors import UnsupportedModel, WeightFileError
from fixedgraph.models.config import ModelConfig
from fixedgraph.weights import expected_shapes, open_weights

CONFIG = {
    "architectures": ["Qwen2ForCausalLM"], "vocab_size": 96, "hidden_size": 64,
    "intermediate_size": 80, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "max_position_embeddings": 512, "tie_word_embeddings": False,
    "eos_token_id": 1,
}


def _tensors(config: dict, dtype: type) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    cfg = ModelConfig.from_hf_dict(config)
    return {name: (rng.standard_normal(shape) * rng.uniform(0.01, 3)).astype(dtype)
            for name, shape in expected_shapes(cfg).items()}


def _write_dir(path, tensors: dict[str, np.ndarray], shards: int = 1, config: dict = CONFIG) -> None:
    path.mkdir(exist_ok=True)
    (path / "config.json").write_text(json.dumps(config))
    if shards == 1:
        save_file(tensors, str(path / "model.safetensors"))
        return
    names = list(tensors)
    weight_map = {}
    for s in range(shards):
        fname = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        save_file(part, str(path / fname))
        weight_map.update({n: fname for n in part})
    (path / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _write_bf16_file(path, tensors: dict[str, np.ndarray]) -> None:
    """Write a bf16 safetensors file by hand from the format spec (numpy has no bf16 dtype)."""
    header, offset, blobs = {}, 0, []
    for name, bits in tensors.items():
        blob = bits.astype("<u2").tobytes()
        header[name] = {"dtype": "BF16", "shape": list(bits.shape), "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))


@pytest.mark.parametrize("dtype,shards", [(np.float32, 1), (np.float16, 1), (np.float32, 3)])
def test_loads_within_bf16_rounding(tmp_path, dtype, shards):
    tensors = _tensors(CONFIG, dtype)
    _write_dir(tmp_path / "m", tensors, shards)
    src, cfg = open_weights(tmp_path / "m")
    with src:
        assert cfg.arch == "qwen2" and cfg.attention_bias
        assert sorted(src.names()) == sorted(tensors)
        for name, ref in tensors.items():
            got = src.load(name)
            assert got.dtype == np.uint16 and got.shape == ref.shape == src.shape(name)
            ref32 = ref.astype(np.float32)
            # bf16 keeps 8 significant bits: round-to-nearest is within half an ulp, 2^-8 relative.
            np.testing.assert_allclose(bf16.to_f32(got), ref32, rtol=2.0 ** -8, atol=0)
            np.testing.assert_array_equal(got, bf16.from_f32(ref32))  # and it is the RNE value


def test_bf16_bits_are_exact(tmp_path):
    rng = np.random.default_rng()
    cfg = ModelConfig.from_hf_dict(CONFIG)
    bits = {n: bf16.from_f32(rng.standard_normal(s).astype(np.float32)) for n, s in expected_shapes(cfg).items()}
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    _write_bf16_file(tmp_path / "model.safetensors", bits)
    src, _ = open_weights(tmp_path)
    for name, ref in bits.items():
        np.testing.assert_array_equal(src.load(name), ref)
    src.close()


def test_missing_path_and_missing_weights(tmp_path):
    with pytest.raises(WeightFileError, match="does not exist"):
        open_weights(tmp_path / "absent")
    (tmp_path / "config.json").write_text(json.dumps(CONFIG))
    with pytest.raises(WeightFileError, match="model.safetensors"):
        open_weights(tmp_path)


def test_truncated_file(tmp_path):
    _write_dir(tmp_path, _tensors(CONFIG, np.float32))
    f = tmp_path / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])
    with pytest.raises(WeightFileError, match=r"model\.safetensors.*re-download"):
        open_weights(tmp_path)


def test_garbage_header(tmp_path):
    _write_dir(tmp_path, _tensors(CONFIG, np.float32))
    (tmp_path / "model.safetensors").write_bytes(struct.pack("<Q", 20) + b"{not json at all!!!" + b"\0" * 64)
    with pytest.raises(WeightFileError, match="not a valid safetensors"):
        open_weights(tmp_path)


def test_missing_tensor_is_named(tmp_path):
    tensors = _tensors(CONFIG, np.float32)
    del tensors["model.layers.1.mlp.up_proj.weight"]
    _write_dir(tmp_path, tensors, shards=2)
    with pytest.raises(WeightFileError, match=r"missing tensor 'model\.layers\.1\.mlp\.up_proj\.weight'"):
        open_weights(tmp_path)


def test_wrong_shape_is_named(tmp_path):
    tensors = _tensors(CONFIG, np.float32)
    tensors["model.layers.0.self_attn.k_proj.weight"] = np.ones((48, 64), np.float32)
    _write_dir(tmp_path, tensors)
    with pytest.raises(WeightFileError, match=r"k_proj\.weight' has shape \(48, 64\), config expects \(32, 64\)"):
        open_weights(tmp_path)


def test_unknown_architecture(tmp_path):
    _write_dir(tmp_path, _tensors(CONFIG, np.float32),
               config=dict(CONFIG, architectures=["FalconForCausalLM"]))
    with pytest.raises(UnsupportedModel, match="FalconForCausalLM.*supported: LlamaForCausalLM"):
        open_weights(tmp_path)


def test_load_of_absent_name_names_file(tmp_path):
    _write_dir(tmp_path, _tensors(CONFIG, np.float32))
    src, _ = open_weights(tmp_path)
    with pytest.raises(WeightFileError, match="'model.layers.9.mlp.up_proj.weight' not found in"):
        src.load("model.layers.9.mlp.up_proj.weight")
    assert src.has("lm_head.weight") and not src.has("model.layers.9.mlp.up_proj.weight")

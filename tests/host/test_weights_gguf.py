"""GGUFSource: quant types, llama.cpp's Q/K permutation, tying, and malformed files."""
from __future__ import annotations

import os
from pathlib import Path

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q
from gguf.quants import dequantize, quantize

from fixedgraph import bf16
from fixedgraph.errors import UnsupportedModel, WeightFileError
from fixedgraph.weights import open_weights

HIDDEN, FFN, HEADS, KV_HEADS, VOCAB, LAYERS = 64, 96, 4, 2, 80, 2
HEAD_DIM = HIDDEN // HEADS
# Worst-case error of each format relative to the block's largest magnitude (plus bf16 rounding):
# half a quantization step, a little more for the f16-rounded block scale/min (Q4_1: (max-min)/30).
TOLERANCE = {Q.F32: 0.0, Q.F16: 1e-3, Q.BF16: 0.0, Q.Q8_0: 1 / 127, Q.Q4_0: 1 / 7, Q.Q4_1: 1 / 12}


def llama_cpp_permute(w: np.ndarray, heads: int) -> np.ndarray:
    """The row order llama.cpp's converter writes for llama Q/K: per head, (half, pair) -> (pair, half)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def hf_tensors(arch: str, tied: bool) -> dict[str, np.ndarray]:
    rng = np.random.default_rng()
    out = {"token_embd.weight": (VOCAB, HIDDEN), "output_norm.weight": (HIDDEN,)}
    if not tied:
        out["output.weight"] = (VOCAB, HIDDEN)
    for i in range(LAYERS):
        out |= {f"blk.{i}.attn_norm.weight": (HIDDEN,), f"blk.{i}.ffn_norm.weight": (HIDDEN,),
                f"blk.{i}.attn_q.weight": (HEADS * HEAD_DIM, HIDDEN),
                f"blk.{i}.attn_k.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                f"blk.{i}.attn_v.weight": (KV_HEADS * HEAD_DIM, HIDDEN),
                f"blk.{i}.attn_output.weight": (HIDDEN, HEADS * HEAD_DIM),
                f"blk.{i}.ffn_gate.weight": (FFN, HIDDEN), f"blk.{i}.ffn_up.weight": (FFN, HIDDEN),
                f"blk.{i}.ffn_down.weight": (HIDDEN, FFN)}
        if arch == "qwen2":
            out |= {f"blk.{i}.attn_q.bias": (HEADS * HEAD_DIM,), f"blk.{i}.attn_k.bias": (KV_HEADS * HEAD_DIM,),
                    f"blk.{i}.attn_v.bias": (KV_HEADS * HEAD_DIM,)}
    return {n: rng.standard_normal(s).astype(np.float32) for n, s in out.items()}


def write_gguf(path: Path, arch: str, tensors: dict[str, np.ndarray], qtype: Q = Q.F32,
               skip: str | None = None) -> None:
    """Write a GGUF as llama.cpp's converter would: Q/K rows permuted for llama, 1-D tensors f32."""
    w = gguf.GGUFWriter(str(path), arch)
    for key, val in [("block_count", LAYERS), ("embedding_length", HIDDEN), ("feed_forward_length", FFN),
                     ("attention.head_count", HEADS), ("attention.head_count_kv", KV_HEADS),
                     ("context_length", 256)]:
        w.add_uint32(f"{arch}.{key}", val)
    w.add_float32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5)
    w.add_float32(f"{arch}.rope.freq_base", 10000.0)
    w.add_token_list([f"tok{i}" for i in range(VOCAB)])
    for name, data in tensors.items():
        if name == skip:
            continue
        if arch == "llama" and ".attn_q." in name:
            data = llama_cpp_permute(data, HEADS)
        elif arch == "llama" and ".attn_k." in name:
            data = llama_cpp_permute(data, KV_HEADS)
        if data.ndim == 1 or qtype == Q.F32:
            w.add_tensor(name, data)
        elif qtype == Q.F16:
            w.add_tensor(name, quantize(data, Q.F16))
        else:
            w.add_tensor(name, quantize(data, qtype), raw_dtype=qtype)
    w.write_header_to_file(); w.write_kv_data_to_file(); w.write_tensors_to_file(); w.close()


def hf_name(gguf_name: str) -> str:
    from fixedgraph.weights.gguf_source import hf_name as mapped
    return mapped(gguf_name)


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16, Q.Q8_0, Q.Q4_0, Q.Q4_1], ids=lambda q: q.name)
def test_quant_types_and_permutation(tmp_path, qtype):
    tensors = hf_tensors("llama", tied=False)
    write_gguf(tmp_path / "m.gguf", "llama", tensors, qtype)
    src, cfg = open_weights(tmp_path / "m.gguf")
    with src:
        assert (cfg.arch, cfg.num_heads, cfg.num_kv_heads, cfg.tie_word_embeddings) == ("llama", 4, 2, False)
        for name, ref in tensors.items():
            got = src.load(hf_name(name))
            assert got.dtype == np.uint16 and got.shape == ref.shape == src.shape(hf_name(name))
            got32 = bf16.to_f32(got)
            if ref.ndim == 2 and qtype not in (Q.F32, Q.F16):
                # The library's own dequantization of the same rows (unpermuted here) is exact truth.
                expect = dequantize(quantize(ref, qtype), qtype)
                np.testing.assert_array_equal(got, bf16.from_f32(expect), err_msg=name)
            block_max = np.abs(ref).max(axis=-1, keepdims=True)
            tol = TOLERANCE[qtype if ref.ndim == 2 else Q.F32] * block_max + 2.0 ** -8 * np.abs(ref)
            assert np.all(np.abs(got32 - ref) <= tol + 1e-12), name


def test_qwen2_is_not_permuted_and_has_bias(tmp_path):
    tensors = hf_tensors("qwen2", tied=True)
    write_gguf(tmp_path / "m.gguf", "qwen2", tensors)
    src, cfg = open_weights(tmp_path / "m.gguf")
    assert cfg.arch == "qwen2" and cfg.attention_bias and cfg.tie_word_embeddings
    assert not src.has("lm_head.weight")
    for name in ("blk.1.attn_q.weight", "blk.1.attn_k.weight", "blk.0.attn_q.bias"):
        np.testing.assert_array_equal(src.load(hf_name(name)), bf16.from_f32(tensors[name]))
    src.close()


def test_permutation_round_trip_is_not_identity(tmp_path):
    # Guard: if unpermuting were skipped the loaded Q would differ from the HF original.
    tensors = hf_tensors("llama", tied=True)
    q = tensors["blk.0.attn_q.weight"]
    assert not np.array_equal(llama_cpp_permute(q, HEADS), q)
    write_gguf(tmp_path / "m.gguf", "llama", tensors)
    src, _ = open_weights(tmp_path / "m.gguf")
    np.testing.assert_array_equal(src.load("model.layers.0.self_attn.q_proj.weight"), bf16.from_f32(q))
    np.testing.assert_array_equal(src.load("model.layers.0.self_attn.k_proj.weight"),
                                  bf16.from_f32(tensors["blk.0.attn_k.weight"]))
    src.close()


def test_truncated_and_garbage_files(tmp_path):
    write_gguf(tmp_path / "m.gguf", "llama", hf_tensors("llama", tied=True), Q.Q8_0)
    data = (tmp_path / "m.gguf").read_bytes()
    (tmp_path / "cut.gguf").write_bytes(data[: len(data) - 1000])
    with pytest.raises(WeightFileError, match=r"cut\.gguf.*truncated"):
        open_weights(tmp_path / "cut.gguf")
    (tmp_path / "head.gguf").write_bytes(data[:300])
    with pytest.raises(WeightFileError, match=r"head\.gguf.*re-download"):
        open_weights(tmp_path / "head.gguf")
    (tmp_path / "junk.gguf").write_bytes(os.urandom(4096))
    with pytest.raises(WeightFileError, match=r"junk\.gguf is not a readable GGUF"):
        open_weights(tmp_path / "junk.gguf")
    with pytest.raises(WeightFileError, match="does not exist"):
        open_weights(tmp_path / "absent.gguf")


def test_missing_tensor_and_wrong_shape(tmp_path):
    tensors = hf_tensors("llama", tied=True)
    write_gguf(tmp_path / "a.gguf", "llama", tensors, skip="blk.1.ffn_down.weight")
    with pytest.raises(WeightFileError, match=r"a\.gguf.*missing tensor 'model\.layers\.1\.mlp\.down_proj"):
        open_weights(tmp_path / "a.gguf")
    tensors["blk.0.ffn_up.weight"] = np.ones((FFN + 32, HIDDEN), np.float32)
    write_gguf(tmp_path / "b.gguf", "llama", tensors)
    with pytest.raises(WeightFileError, match=r"up_proj\.weight' has shape \(128, 64\), config expects \(96, 64\)"):
        open_weights(tmp_path / "b.gguf")


def test_unknown_architecture(tmp_path):
    write_gguf(tmp_path / "m.gguf", "falcon", hf_tensors("llama", tied=True))
    with pytest.raises(UnsupportedModel, match="'falcon' is not supported.*qwen3"):
        open_weights(tmp_path / "m.gguf")


def smollm2_gguf() -> Path:
    """The real SmolLM2 GGUF from $FIXEDGRAPH_SMOLLM2_WHEEL or the cache; skip when neither."""
    from fixedgraph.models import default

    if os.environ.get(default.WHEEL_ENV) or (default.cache_dir() / default.GGUF_NAME).is_file():
        return default.default_model_path()
    pytest.skip(f"SmolLM2 GGUF not available: set ${default.WHEEL_ENV} to {default.WHEEL_NAME}")


def test_real_smollm2_gguf():
    src, cfg = open_weights(smollm2_gguf())
    with src:
        assert (cfg.arch, cfg.num_layers, cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads) == ("llama", 30, 576, 9, 3)
        assert cfg.tie_word_embeddings and cfg.vocab_size == 49152 and cfg.eos_token_ids == (2,)
        emb = bf16.to_f32(src.load("model.embed_tokens.weight"))  # [vocab, hidden] Q8_0 -> bf16
        assert emb.shape == (49152, 576) and np.isfinite(emb).all() and emb.std() > 0.01
        k = bf16.to_f32(src.load("model.layers.3.self_attn.k_proj.weight"))  # Q4_1
        assert k.shape == (192, 576) and np.isfinite(k).all()

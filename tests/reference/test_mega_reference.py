"""The persistent decode step (FIXEDGRAPH_MEGA=1, ptx/src/mega.cu) on the reference backend: its
twin against float32 transformers through the engine, and its program's shape."""
import os

import pytest

from tests.model_checks import check_greedy, check_teacher_forced


@pytest.mark.parametrize("name,prompt_len,chunk", [
    ("tiny-llama", 40, 16),   # llama3 rope scaling, GQA 2, head_dim 64, untied head
    ("tiny-qwen2", 40, 16),   # qkv bias, tied head
    ("tiny-qwen3", 40, 16),   # QK-norm, head_dim 128
    ("tiny-long", 1300, 256),  # GQA 4: 1300 keys in 21 splits and their merge
])
def test_mega_teacher_forced_logits(name, prompt_len, chunk, tmp_path, rng, monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    llm, _, _ = check_teacher_forced(name, "reference", tmp_path, rng, prompt_len=prompt_len, n_new=12, chunk=chunk)
    assert llm.model.mega is not None
    assert [op.entry for op in llm.model.decode_program(1, False).ops] == ["stage_meta_ring_embed", "decode_mega"]


def test_mega_greedy_tokens_match(tmp_path, rng, monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    check_greedy("tiny-qwen3", "reference", tmp_path, rng, prompt_len=20, n_new=16, chunk=16)


def test_bench_mega_runs_on_the_reference_backend(monkeypatch):
    monkeypatch.delenv("FIXEDGRAPH_MEGA", raising=False)
    # tools/bench_mega.py's path end to end (the twin writes no marks: every share reads 0)
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("bench_mega", Path(__file__).parents[2] / "tools/bench_mega.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    r = mod.profile("tiny-qwen3", 40, 4, backend="reference")
    assert set(r["ops"]) >= {"norm+qkv", "attention", "norm+lm_head+argmax"} and r["ms_per_token_wall"] > 0
    assert "FIXEDGRAPH_MEGA" not in os.environ  # the tool leaves the knob as it found it (unset here)

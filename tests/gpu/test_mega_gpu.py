"""The persistent decode step (FIXEDGRAPH_MEGA=1, ptx/src/mega.cu) on the H200 against float32
transformers on the same bf16 weights, and its twin."""
import numpy as np
import pytest

from tests.model_checks import check_graph_equals_eager, check_greedy, check_teacher_forced


@pytest.mark.parametrize("name,prompt_len,n_new,chunk", [
    ("tiny-llama", 128, 64, 64),    # head_dim 64, GQA 2, llama3 rope scaling
    ("tiny-qwen2", 128, 64, 64),    # qkv bias, tied head
    ("tiny-qwen3", 128, 64, 64),    # QK-norm, head_dim 128
    ("tiny-mistral", 40, 40, 16),   # GQA 4 at head_dim 64, contexts from one split upwards
    ("tiny-long", 1300, 16, 256),   # GQA 4: 21 key splits and their merge
    ("qwen3-0.6b", 100, 60, 64),    # the real shapes: 28 layers, 132 CTAs, 151936-row head
])
def test_mega_teacher_forced_logits(name, prompt_len, n_new, chunk, cuda, tmp_path, rng, monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    llm, _, tokens = check_teacher_forced(name, "cuda", tmp_path, rng, prompt_len=prompt_len, n_new=n_new,
                                          chunk=chunk)
    assert [op.entry for op in llm.model.decode_program(1, False).ops] == ["stage_meta_ring_embed", "decode_mega"]


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_mega_greedy_tokens_identical(name, cuda, tmp_path, rng, monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    check_greedy(name, "cuda", tmp_path, rng, prompt_len=128, n_new=64, chunk=256)


def test_mega_graph_replay_equals_eager_and_the_twin(cuda, tmp_path, rng, monkeypatch):
    # the graph replay against the eager program (the same kernel: bit for bit), and the GPU's
    # logits against the twin's on the reference backend (the summation orders differ)
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    llm, _, tokens = check_teacher_forced("tiny-qwen3", "cuda", tmp_path, rng, prompt_len=128, n_new=16, chunk=128)
    check_graph_equals_eager(llm, tokens, 128)
    from fixedgraph.engine import LLM

    ref = LLM(tmp_path, backend="reference", max_model_len=llm.model.sizes.max_model_len, prefill_chunk=128,
              progress=False)
    a = llm.runner.teacher_forced_logits(tokens, 128)
    b = ref.runner.teacher_forced_logits(tokens, 128)
    err = np.abs(a - b).max() / np.abs(b).max()
    assert err < 2e-2, err


@pytest.mark.parametrize("name,prompt_len", [("tiny-long", 1300), ("qwen3-0.6b", 100)])
def test_mega_quiet_policies_change_no_bit(name, prompt_len, cuda, rng, monkeypatch):
    # FIXEDGRAPH_MEGA_QUIET only moves when the loader issues its copies: the same logits bit for
    # bit, and no policy stalls the step (the loader may always issue the compute's own op)
    from fixedgraph.testing.checkpoints import random_llm

    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    seed = int(rng.integers(1 << 30))
    tokens = None
    logits = {}
    for policy in ("0", "1", "2", "3"):
        monkeypatch.setenv("FIXEDGRAPH_MEGA_QUIET", policy)
        llm = random_llm(name, seed, max_model_len=prompt_len + 32, prefill_chunk=256, lift_positions=True)
        if tokens is None:
            tokens = rng.integers(0, llm.config.vocab_size, size=prompt_len + 12).tolist()
        logits[policy] = llm.runner.teacher_forced_logits(tokens, prompt_len)
        del llm
    for policy in ("1", "2", "3"):
        assert np.array_equal(logits[policy], logits["0"]), policy

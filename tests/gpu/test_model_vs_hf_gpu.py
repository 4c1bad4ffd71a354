"""The dense decoder on the H200 against transformers in float32 on the same bf16 weights."""
import pytest

from tests.model_checks import check_graph_equals_eager, check_greedy, check_teacher_forced


@pytest.mark.parametrize("mode", ["1", "2", "3"])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-odd", "tiny-qwen3"])
def test_teacher_forced_logits_with_heads_on_n(name, mode, cuda, tmp_path, rng, monkeypatch):
    # FIXEDGRAPH_ATTN_SWAP=1: the heads-on-N _sw decode entries (2: d128 on _swp, the same code
    # holding idle registers; 3: _swp at every head dim; ops.attention.choose_swap) at
    # head dims 64 (G = 2 and 3) and 128 (G = 2) against float32 transformers
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SWAP", mode)
    check_teacher_forced(name, "cuda", tmp_path, rng, prompt_len=128, n_new=64, chunk=64)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-odd", "qwen3-0.6b"])
def test_teacher_forced_logits_128_prompt_64_decode(name, cuda, tmp_path, rng):
    check_teacher_forced(name, "cuda", tmp_path, rng, prompt_len=128, n_new=64, chunk=64)


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_greedy_64_tokens_identical(name, cuda, tmp_path, rng):
    check_greedy(name, "cuda", tmp_path, rng, prompt_len=128, n_new=64, chunk=256)


def test_graph_replay_bitwise_equals_eager(cuda, tmp_path, rng):
    llm, _, tokens = check_teacher_forced("tiny-qwen3", "cuda", tmp_path, rng, prompt_len=128, n_new=16, chunk=128)
    check_graph_equals_eager(llm, tokens, 128)


def test_decode_across_context_buckets(cuda, tmp_path, rng):
    # keys 101..160 cross the 128-key bucket, where the runner switches to a graph with more splits
    check_teacher_forced("qwen3-0.6b", "cuda", tmp_path, rng, prompt_len=100, n_new=60, chunk=64)


def test_greedy_after_many_prefill_chunks(cuda, tmp_path, rng):
    # 13 chunks, the last one partial: earlier chunks are still in flight when the last is
    # launched, so a token published by any of them where the host waits would be caught here
    check_greedy("tiny-qwen3", "cuda", tmp_path, rng, prompt_len=200, n_new=16, chunk=16)


@pytest.mark.parametrize("prompt_len", [4200, 16500])
def test_teacher_forced_logits_after_long_prompts(prompt_len, cuda, tmp_path, rng):
    # Long contexts against an independent reference (the long-context tests compare graphs with
    # checked eager runs of the same kernels): 8B's GQA ratio and head_dim, many prefill chunks,
    # decode at the large context buckets (many attention splits and their merge)
    check_teacher_forced("tiny-long", "cuda", tmp_path, rng, prompt_len=prompt_len, n_new=24, chunk=256)


@pytest.mark.parametrize("swap", ["0", "1", "2", "3"])
def test_teacher_forced_logits_at_one_attention_cta_per_sm(swap, cuda, tmp_path, rng, monkeypatch):
    # 8 kv heads at ~3k keys: the last context bucket (3032 keys, 12 MiB of K/V a launch) plans
    # one attention CTA per SM (16 splits, choose_num_splits), where 8B-class GQA models decode
    # 2-6k-token contexts; against float32 transformers. swap 1: the heads-on-N _sw entry in every
    # decode graph of the run (G = 2; ops.attention.choose_swap), swap 2 and 3 (the default): its
    # _swp form
    monkeypatch.setenv("FIXEDGRAPH_ATTN_SWAP", swap)
    check_teacher_forced("qwen3-0.6b", "cuda", tmp_path, rng, prompt_len=3000, n_new=24, chunk=256)


@pytest.mark.parametrize("mode, entry", [("1", "gemv_rmsnorm_bf16_row_dn"), ("2", "gemv_rmsnorm_bf16_row_dw")])
@pytest.mark.parametrize("name", ["tiny-qwen3", "qwen3-0.6b"])
def test_teacher_forced_logits_with_the_deferred_norm(name, mode, entry, cuda, tmp_path, rng, monkeypatch):
    # FIXEDGRAPH_NORM_DEFER=1 / 2: the one-row norm GEMVs on gemv_rmsnorm_bf16_row_dn / _dw (1/rms
    # applied to the outputs after the multiply; _dw: x built warp by warp) on tiny-qwen3 (K 200,
    # a zero tail) and Qwen3-0.6B's real shapes, against float32 transformers with the default
    # entries' margins (the wide register path, K > 1024, and _dw's other tails and splits: their
    # kernel cases; tiny-llama: the reference backend's test)
    monkeypatch.setenv("FIXEDGRAPH_NORM_DEFER", mode)
    llm, _, _ = check_teacher_forced(name, "cuda", tmp_path, rng, prompt_len=128, n_new=64, chunk=64)
    entries = [op.entry for op in llm.model.decode_program(1, False, llm.model.ctx_buckets[0]).launches]
    assert entry in entries and "gemv_rmsnorm_bf16_row" not in entries

"""The dense decoder on the reference backend against transformers on the CPU (tiny configs)."""
import pytest

from tests.model_checks import check_graph_equals_eager, check_greedy, check_teacher_forced


@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-mistral", "tiny-odd"])
def test_teacher_forced_logits(name, tmp_path, rng):
    # 40-token prompt in 16-token chunks: three prefill passes, the last one padded
    check_teacher_forced(name, "reference", tmp_path, rng, prompt_len=40, n_new=12, chunk=16)


def test_greedy_tokens_match(tmp_path, rng):
    check_greedy("tiny-qwen3", "reference", tmp_path, rng, prompt_len=20, n_new=16, chunk=16)


def test_graph_replay_equals_eager(tmp_path, rng):
    llm, _, tokens = check_teacher_forced("tiny-qwen2", "reference", tmp_path, rng, prompt_len=17, n_new=4, chunk=16)
    check_graph_equals_eager(llm, tokens, 17)


def test_decode_crosses_context_buckets(tmp_path, rng):
    # keys 121..136 cross the 128-key bucket: the runner switches decode graphs (split counts)
    llm, _, _ = check_teacher_forced("tiny-qwen3", "reference", tmp_path, rng, prompt_len=120, n_new=16, chunk=64)
    assert len(llm.model.ctx_buckets) >= 2 and llm.model.ctx_buckets[0] == 128

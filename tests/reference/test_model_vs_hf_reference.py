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


def test_teacher_forced_logits_past_a_thousand_positions(tmp_path, rng):
    # tiny-long (GQA 4, head_dim 128) past the other tiny configs' 1024 positions: rope at large
    # positions, several context buckets, many chunks
    check_teacher_forced("tiny-long", "reference", tmp_path, rng, prompt_len=1300, n_new=8, chunk=256)


def test_cast_model_keeps_the_rotary_frequencies_exact():
    # plain Module.to(bfloat16) rounds transformers' inv_freq buffers (0.80584 -> 0.80469 for
    # theta 1e6, D 128): a reference whose rotations drift a tenth of a radian within 600
    # positions, against which a correct long-context implementation looked 4x worse
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.models.rope import inv_freq
    from fixedgraph.testing.checkpoints import cast_model, random_model

    model = random_model("tiny-long", 0)
    exact = {n: b.clone() for n, b in model.named_buffers() if n.endswith("inv_freq")}
    assert exact
    want = inv_freq(ModelConfig.from_hf_dict(model.config.to_dict()))
    for b in exact.values():
        assert b.dtype == torch.float32 and abs(b.double().numpy() - want).max() < 1e-6 * want.max()
    cast_model(model, torch.bfloat16)
    assert next(model.parameters()).dtype == torch.bfloat16
    cast_model(model, torch.float32)
    got = dict(model.named_buffers())
    assert all(got[n].dtype == torch.float32 and torch.equal(got[n], b) for n, b in exact.items())
    model.to(torch.bfloat16)  # what cast_model avoids
    assert not all(torch.equal(dict(model.named_buffers())[n].float(), b) for n, b in exact.items())


@pytest.mark.parametrize("mode, entry", [("1", "gemv_rmsnorm_bf16_row_dn"), ("2", "gemv_rmsnorm_bf16_row_dw")])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-qwen3"])
def test_teacher_forced_logits_with_the_deferred_norm(name, mode, entry, tmp_path, rng, monkeypatch):
    # FIXEDGRAPH_NORM_DEFER=1 / 2: the one-row norm GEMVs take gemv_rmsnorm_bf16_row_dn / _dw (x =
    # norm_w * h, 1/rms applied to the outputs), within the same margins of float32 transformers
    monkeypatch.setenv("FIXEDGRAPH_NORM_DEFER", mode)
    llm, _, _ = check_teacher_forced(name, "reference", tmp_path, rng, prompt_len=40, n_new=12, chunk=16)
    entries = [op.entry for op in llm.model.decode_program(1, False, llm.model.ctx_buckets[0]).launches]
    assert entry in entries and "gemv_rmsnorm_bf16_row" not in entries

"""The engine end to end on the reference backend: API behaviour, errors, streaming, sampling."""
import pytest

from fixedgraph.engine import LLM
from fixedgraph.errors import ContextOverflow, InvalidSamplingParams
from fixedgraph.sampling import SamplingParams


@pytest.fixture(scope="module")
def tiny():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.testing.checkpoints import random_model
    from fixedgraph.weights.state_dict_source import StateDictSource

    hf = random_model("tiny-llama", 11, dtype="bfloat16")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    return LLM(weights=(StateDictSource(hf.state_dict()), cfg), backend="reference", max_model_len=96,
               prefill_chunk=32, progress=False)


@pytest.fixture(scope="module")
def smol():
    from tests.smollm2_check import default_gguf

    return LLM(default_gguf(), backend="reference", max_model_len=128, progress=False)


def test_seeded_sampling_is_reproducible_and_seed_dependent(tiny, rng):
    prompt = rng.integers(0, 1000, size=9).tolist()
    p = dict(temperature=1.0, top_k=50, top_p=0.95, max_tokens=20, ignore_eos=True)
    a = tiny.generate([prompt], SamplingParams(seed=5, **p))[0].token_ids
    b = tiny.generate([prompt], SamplingParams(seed=5, **p))[0].token_ids
    c = tiny.generate([prompt], SamplingParams(seed=6, **p))[0].token_ids
    assert a == b and len(a) == 20
    assert a != c


def test_max_tokens_and_context_limit(tiny, rng):
    prompt = rng.integers(0, 1000, size=80).tolist()
    out = tiny.generate([prompt], SamplingParams(temperature=0, max_tokens=50, ignore_eos=True))[0]
    assert out.finish_reason == "length" and len(out.token_ids) == 96 - 80  # stopped by the context
    out = tiny.generate([prompt[:10]], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0]
    assert len(out.token_ids) == 3 and out.metrics.generated_tokens == 3


def test_prompt_longer_than_context_is_refused_and_nothing_leaks(tiny, rng):
    free = tiny.runner.alloc.num_free_blocks
    with pytest.raises(ContextOverflow, match="prompt of 200 tokens.*context of 96"):
        tiny.generate([rng.integers(0, 1000, size=200).tolist()], SamplingParams(max_tokens=4))
    assert tiny.runner.alloc.num_free_blocks == free
    out = tiny.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))[0]
    assert len(out.token_ids) == 4  # the engine still works


def test_invalid_sampling_params_are_clear():
    with pytest.raises(InvalidSamplingParams, match="top_p"):
        SamplingParams(top_p=1.5)
    with pytest.raises(InvalidSamplingParams, match="temperature"):
        SamplingParams(temperature=-1)


def test_text_prompt_without_tokenizer_says_what_to_do(tiny):
    with pytest.raises(ValueError, match="token ids"):
        tiny.generate(["hello"], SamplingParams(max_tokens=2))


def test_stream_equals_generate_and_stop_strings(smol):
    params = SamplingParams(temperature=0, max_tokens=16, ignore_eos=True)
    full = smol.generate(["Once upon a time"], params)[0]
    streamed = "".join(c.text for c in smol.stream("Once upon a time", params))
    assert streamed == full.text and full.text.startswith(", the city")
    # stop at a word that appears in the greedy text: output ends before it, reason "stop"
    word = full.text.split()[3]
    out = smol.generate(["Once upon a time"], SamplingParams(temperature=0, max_tokens=16, stop=[word]))[0]
    assert out.finish_reason == "stop" and word not in out.text and full.text.startswith(out.text)


def test_chat_template_prompt(smol):
    ids = smol.encode("Hi", chat=True)
    assert smol.tokenizer.decode(ids, skip_special_tokens=False).count("<|im_start|>") >= 2
    out = smol.generate(["What is 2+2?"], SamplingParams(temperature=0, max_tokens=8), chat=True)[0]
    assert out.token_ids and out.finish_reason in ("stop", "length")


def test_fixed_addresses_do_not_move(tiny, rng):
    """The Fixed record names arena addresses that stay the same through generation."""
    f = tiny.fixed
    assert f.hidden == tiny.arena.addr("hidden") and f.logits == tiny.arena.addr("logits")
    assert len(f.k_pools) == tiny.config.num_layers and f.meta.num_seqs == 1
    assert f.cache_stride == f.block_size * tiny.config.num_kv_heads * tiny.config.head_dim
    base = tiny.arena.base
    tiny.generate([rng.integers(0, 1000, size=5).tolist()], SamplingParams(max_tokens=3, ignore_eos=True))
    assert tiny.arena.base == base and tiny.fixed is f and "block_table" in f.table()


def test_a_step_that_never_publishes_its_token_is_an_error(tiny):
    """The stream ran everything queued but the ring slot still holds the sentinel: the runner
    says so instead of spinning forever (on the GPU the same check follows a stream query)."""
    from fixedgraph.errors import FixedGraphError

    r = tiny.runner
    step = 3
    r.ring_i32[step % tiny.model.sizes.ring_len] = -1
    with pytest.raises(FixedGraphError, match="without publishing a token"):
        r._wait_token(step)


def test_token_cadence_sets_the_stall_patience(tiny, rng):
    """The runner learns the interval between tokens; a stall check waits twice that."""
    r = tiny.runner
    tiny.generate([rng.integers(0, 1000, size=5).tolist()], SamplingParams(max_tokens=12, ignore_eos=True))
    assert r._token_interval_s > 0.0 and r._last_token_t is not None


def test_step_hook_brackets_every_decode_launch(tiny, rng):
    """The profiler's hook sees each decode launch just before and just after it, named by its
    first step: one step per launch, or groups of decode_group then the tail one by one."""
    r, calls = tiny.runner, []
    r.step_hook = lambda step, done: calls.append((step, done))
    prompt = rng.integers(0, 1000, size=5).tolist()
    group = r.decode_group
    try:
        tiny.generate([prompt], SamplingParams(max_tokens=12, ignore_eos=True))  # 11 decode steps
        firsts = list(range(1, 12 - (11 % group), group)) + list(range(12 - (11 % group), 12))
        assert calls == [(k, d) for k in firsts for d in (False, True)]
        r.decode_group, calls[:] = 1, []
        tiny.generate([prompt], SamplingParams(max_tokens=7, ignore_eos=True))
        assert calls == [(k, d) for k in range(1, 7) for d in (False, True)]
    finally:
        r.step_hook, r.decode_group = None, group


def test_lookahead_default_and_its_cap(tiny):
    r = tiny.runner
    assert r.lookahead == 3 and r.max_lookahead == min(tiny.model.sizes.ring_len, r.num_slots) - 2 >= 4


def test_lookahead_below_one_is_refused():
    with pytest.raises(ValueError, match="lookahead must be at least 1"):
        LLM(weights=(None, None), backend="reference", lookahead=0)


def test_host_step_stats_cover_every_decode_step(tiny, rng, monkeypatch):
    """The runner times its host work per decode step: the mean over all since a reset, the
    median / p90 / max over the last HOST_STEP_HISTORY (a short history here, so it wraps)."""
    import fixedgraph.runner as runner_mod
    r = tiny.runner
    monkeypatch.setattr(runner_mod, "HOST_STEP_HISTORY", 4)
    r.reset_host_stats()
    assert r.host_step_stats() == {}
    tiny.generate([rng.integers(0, 1000, size=5).tolist()], SamplingParams(max_tokens=9, ignore_eos=True))
    st = r.host_step_stats()
    assert st["steps"] == 8  # the prefill makes token 1; steps 1..8 make the rest
    assert 0 < st["median_us"] <= st["p90_us"] <= st["max_us"]
    recorded = sorted(x * 1e6 for x in r.host_step_hist[:4])
    assert st["max_us"] == recorded[-1] and st["median_us"] == (recorded[1] + recorded[2]) / 2
    assert st["mean_us"] == r.host_step_s / 8 * 1e6
    # the launch call's share of each step: part of it, never more
    launches = sorted(x * 1e6 for x in r.host_launch_hist[:4])
    assert st["launch_median_us"] == (launches[1] + launches[2]) / 2
    assert all(0 < a <= b for a, b in zip(r.host_launch_hist[:4], r.host_step_hist[:4]))
    # the thread's CPU time for the same work (its clock is read just after the wall clock at
    # both ends: never more than the wall time plus that read, here well under 1 ms)
    cpus = sorted(x * 1e6 for x in r.host_cpu_hist[:4])
    assert st["cpu_median_us"] == (cpus[1] + cpus[2]) / 2 and st["cpu_mean_us"] == r.host_cpu_s / 8 * 1e6
    assert all(0 <= c <= w + 1e-3 for c, w in zip(r.host_cpu_hist[:4], r.host_step_hist[:4])) and cpus[-1] > 0


def test_only_the_last_prefill_chunk_publishes_a_token(tiny, rng, monkeypatch):
    # Every prefill pass with a head writes its token to ring[step]. A chunk before the last, still
    # in flight on the GPU, must not write ring[0], the entry the host resets and then waits on
    # for the prompt's token (it handed back a wrong token and decode then rewrote the staging
    # slots under the last chunk: faults on the H200 at 6000+ tokens; any prompt of 2+ chunks whose
    # last chunk did not fall on the runner's drain was exposed). Those chunks run the
    # headless body program, which publishes nothing.
    r = tiny.runner
    launched = []
    orig = r._launch

    def record(graph):
        launched.append(graph)
        orig(graph)

    monkeypatch.setattr(r, "_launch", record)
    prompt = rng.integers(0, 1000, size=80).tolist()  # 3 chunks of at most 32
    ref = tiny.generate([prompt], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))[0].token_ids
    pre = [g for g in launched if g is r.graphs.prefill_body or g in r.graphs.prefill.values()]
    assert pre[:2] == [r.graphs.prefill_body] * 2 and pre[2] in r.graphs.prefill.values(), pre
    labels = [op.op.label for op in r.graphs.prefill_body.bound.ops]
    assert not {"final_norm", "lm_head", "argmax", "sample"} & set(labels), labels
    assert "final_norm" in [op.op.label for op in r.graphs.prefill[(32, False)].bound.ops]
    assert ref == tiny.generate([prompt], SamplingParams(temperature=0, max_tokens=2, ignore_eos=True))[0].token_ids


@pytest.mark.parametrize("prompt_len", [20, 120])  # 2 and 8 chunks of 16
def test_lagging_device_gives_the_same_tokens(rng, monkeypatch, prompt_len):
    # The reference device's lagging mode queues passes like a GPU stream and runs them only as
    # the host queries or synchronises, while the host's writes to mapped memory land at once:
    # prefill chunks and decode steps in flight see exactly what the host does meanwhile. Two or
    # eight chunks (the runner drains every five) and three decode steps queued ahead must give the
    # tokens of the immediate device (the old runner took an earlier chunk's token and faulted).
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.testing.checkpoints import hf_config, random_llm

    prompt = rng.integers(0, hf_config("tiny-qwen3").vocab_size, size=prompt_len).tolist()
    outs = []
    for lag in ("0", "1"):
        monkeypatch.setenv("FIXEDGRAPH_REFERENCE_LAG", lag)
        llm = random_llm("tiny-qwen3", 5, "reference", 160, prefill_chunk=16)  # the same weights both times
        assert llm.device.lag == (lag == "1")
        outs.append([llm.generate([prompt], SamplingParams(temperature=0, max_tokens=12, ignore_eos=True))[0].token_ids,
                     llm.generate([prompt], SamplingParams(temperature=0.8, top_k=20, seed=3, max_tokens=12,
                                                           ignore_eos=True))[0].token_ids])
    assert outs[0] == outs[1], outs


@pytest.mark.parametrize("lag", ["0", "1"])
def test_decode_groups_give_the_tokens_of_single_steps(rng, monkeypatch, lag):
    # k decode steps per graph launch (decode_group): the same tokens as one step per launch,
    # greedy and seeded sampling, across a context bucket (keys 121.. cross 128; no group
    # straddles it, so each step runs the graph of its own bucket), with a tail shorter than a group, a stop token inside a group, and (lag 1) passes that run only as the
    # host waits, as on a GPU stream
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.testing.checkpoints import hf_config, random_llm

    monkeypatch.setenv("FIXEDGRAPH_REFERENCE_LAG", lag)
    prompt = rng.integers(0, hf_config("tiny-qwen3").vocab_size, size=120).tolist()
    greedy = SamplingParams(temperature=0, max_tokens=15, ignore_eos=True)  # 14 steps: 3 groups of 4 + 2
    sampled = SamplingParams(temperature=0.8, top_k=20, seed=3, max_tokens=15, ignore_eos=True)
    outs, stops = {}, {}
    for group in (1, 3, 4):
        llm = random_llm("tiny-qwen3", 5, "reference", 160, prefill_chunk=16, decode_group=group)
        assert llm.runner.decode_group == group and bool(llm.runner.graphs.decode_group) == (group > 1)
        calls = []
        llm.runner.step_hook = lambda step, done: calls.append(step) if not done else None
        g = llm.generate([prompt], greedy)[0].token_ids
        llm.runner.step_hook = None
        # the stop: the first token from g[6] on that is new (a random model repeats tokens: g[6]
        # itself may already be g[0], which would stop the run at the prefill's token)
        at = next((i for i in range(6, len(g)) if g[i] not in g[:i]), 6)
        stop = SamplingParams(temperature=0, max_tokens=15, ignore_eos=True, stop_token_ids=[g[at]])
        outs[group] = (g, llm.generate([prompt], sampled)[0].token_ids, llm.generate([prompt], stop)[0].token_ids)
        stops[group] = at
        # every launched step is timed (with groups, a stop inside a group leaves steps launched
        # past it, as the lookahead queue does)
        assert llm.runner.host_step_stats()["steps"] >= 14 + 14 + len(outs[group][2]) - 1
        if group == 4:
            assert calls == [1, 5, 9, 13, 14]  # launches: three groups, then the tail step by step
        if group == 3:  # keys 127-129 and 128-130 would straddle the 128-key bucket: single steps
            assert calls == [1, 4, 7, 8, 9, 12]
    assert outs[1] == outs[3] == outs[4], outs
    # the stop run ends at the stop token's first appearance (g[at] is new at `at`), whatever
    # the random prompt made of g[6]
    assert outs[1][2] == outs[1][0][: stops[1] + 1]


def test_decode_group_program_and_limits(tiny):
    prog = tiny.model.decode_program(1, False, tiny.model.ctx_buckets[0], steps=3)
    one = tiny.model.decode_program(1, False, tiny.model.ctx_buckets[0])
    assert len(prog.ops) == 3 * len(one.ops) and prog.name.endswith(".x3")
    assert [op.label for op in prog.ops[: len(one.ops)]] == [op.label for op in one.ops]
    with pytest.raises(ValueError, match="steps must be >= 1"):
        tiny.model.decode_program(1, False, steps=0)
    with pytest.raises(ValueError, match="decode_group must be at least 1"):
        LLM(weights=(None, None), backend="reference", decode_group=0)


def test_ctx_buckets_argument_and_knob(rng, monkeypatch):
    from fixedgraph.engine import ctx_buckets_from
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.testing.checkpoints import random_model
    from fixedgraph.weights.state_dict_source import StateDictSource

    assert ctx_buckets_from(None, None) is None and ctx_buckets_from(None, "") is None
    assert ctx_buckets_from("128, 1024", None) == (128, 1024)
    assert ctx_buckets_from(None, "256,512") == (256, 512)
    assert ctx_buckets_from([64], "256") == (64,)  # the argument wins over the environment
    for bad in ("512,128", "0,128", "x", [128, 128]):
        with pytest.raises(ValueError, match="ascending, distinct positive key counts"):
            ctx_buckets_from(bad, None)
    with pytest.raises(ValueError, match="ctx_buckets='2048,512'"):
        LLM(weights=(None, None), backend="reference", ctx_buckets="2048,512")
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    hf = random_model("tiny-llama", 11, dtype="bfloat16")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    monkeypatch.setenv("FIXEDGRAPH_CTX_BUCKETS", "32,200")
    llm = LLM(weights=(StateDictSource(hf.state_dict()), cfg), backend="reference", max_model_len=96,
              prefill_chunk=32, progress=False)
    assert llm.model.ctx_buckets == (32, 96)  # 200 is past the context, which is always last
    out = llm.generate([rng.integers(0, 1000, size=30).tolist()],
                       SamplingParams(temperature=0, max_tokens=6, ignore_eos=True))[0].token_ids
    assert len(out) == 6  # decodes across the 32-key bucket's edge
    llm.close()


def test_decode_step_opens_with_the_fused_stage(tiny, monkeypatch):
    from fixedgraph.models import dense

    one = tiny.model.decode_program(1, False, tiny.model.ctx_buckets[0])
    entries = [op.entry for op in one.ops]
    # the staging and the embedding in one launch; layer 0's norm + qkv after it signals late
    # (the generic entry); the last down_proj too, so the head lands on idle SMs
    assert entries[0] == "stage_meta_ring_embed" and "embed_gather" not in entries
    assert entries[1] == "gemv_rmsnorm_bf16" and entries[-2] == "gemv_bf16"
    monkeypatch.setattr(dense, "STAGE_EMBED_MAX_BYTES", 0)  # a blob too big for the fused stage
    two = tiny.model.decode_program(1, False, tiny.model.ctx_buckets[0])
    assert [op.entry for op in two.ops][:3] == ["stage_meta_ring", "embed_gather", "gemv_rmsnorm_bf16_row"]


def test_sleep_before_token():
    from fixedgraph.runner import sleep_before_token

    assert sleep_before_token(10.0, None, 0.004) == 0.0  # no cadence yet
    assert sleep_before_token(10.0, 9.999, 100e-6) == 0.0  # short steps: spin only
    assert abs(sleep_before_token(10.001, 10.0, 0.004) - (0.004 - 150e-6 - 0.001)) < 1e-12
    assert sleep_before_token(10.0039, 10.0, 0.004) == 0.0  # due within the margin
    assert sleep_before_token(10.1, 10.0, 0.004) == 0.0  # late already


@pytest.mark.parametrize("mode", ["spin", "sleep"])
def test_wait_modes_give_the_same_tokens(rng, monkeypatch, mode):
    # On the lagging reference device a token appears only once the runner queries the stream
    # (after its patience, >= 1 ms), so the cadence it learns is long and the sleep mode naps
    # before spinning; the tokens are those of the spinning runner.
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import time as time_mod

    from fixedgraph.testing.checkpoints import hf_config, random_llm

    monkeypatch.setenv("FIXEDGRAPH_REFERENCE_LAG", "1")
    naps = []
    real_sleep = time_mod.sleep
    monkeypatch.setattr(time_mod, "sleep", lambda s: (naps.append(s), real_sleep(s))[1])
    prompt = rng.integers(0, hf_config("tiny-qwen3").vocab_size, size=20).tolist()
    llm = random_llm("tiny-qwen3", 5, "reference", 64, prefill_chunk=16)
    params = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    llm.runner.wait_mode = "spin"
    ref = llm.generate([prompt], params)[0].token_ids
    llm.runner.wait_mode = mode
    naps.clear()
    assert llm.generate([prompt], params)[0].token_ids == ref
    assert (len(naps) > 0) == (mode == "sleep") and all(0 < s < 0.2 for s in naps)


def test_a_second_stream_while_one_runs_is_refused_and_the_first_is_unharmed(tiny):
    """The runner decodes one sequence at a time: a second stream iterated between the first's
    tokens would overwrite its staging slots and ring entries (both got wrong tokens before this
    guard). It raises EngineBusy instead; the first finishes with its own tokens, and once it has
    ended (or been closed) the next stream runs."""
    from fixedgraph.errors import EngineBusy

    p = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    want_a = tiny.generate([[1, 2, 3, 4, 5]], p)[0].token_ids
    want_b = tiny.generate([[9, 8, 7, 6]], p)[0].token_ids
    a = tiny.stream([1, 2, 3, 4, 5], p)
    got_a = [next(a).token_id]
    b = tiny.stream([9, 8, 7, 6], p)
    with pytest.raises(EngineBusy, match="another generation is still running"):
        next(b)
    with pytest.raises(EngineBusy, match="teacher-forced"):
        tiny.runner.teacher_forced_logits([1, 2, 3, 4], 3)
    got_a += [c.token_id for c in a if c.token_id is not None]
    assert got_a == want_a
    assert tiny.generate([[9, 8, 7, 6]], p)[0].token_ids == want_b
    c = tiny.stream([9, 8, 7, 6], p)
    next(c)
    c.close()  # an abandoned stream gives the runner back
    assert tiny.generate([[9, 8, 7, 6]], p)[0].token_ids == want_b

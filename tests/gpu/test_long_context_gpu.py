"""Long prompts on the H200: many prefill chunks in flight, the largest context buckets."""
import pytest

from fixedgraph.sampling import SamplingParams


@pytest.mark.parametrize("prompt_len", [6000, 33000])
def test_long_prompt_graphs_equal_checked_eager(cuda, rng, prompt_len):
    # The graphs, with chunks and steps queued ahead, against the same programs run eagerly with a
    # synchronisation after every launch (FIXEDGRAPH_CHECKED's path): bitwise the same kernels,
    # so the tokens must match. Before 0a2e57b a chunk still in flight published its token where
    # the host waited: wrong first tokens, and faults (CUDA_ERROR_ILLEGAL_ADDRESS) at 6000+ tokens.
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.testing.checkpoints import random_llm

    n_new = 8
    llm = random_llm("tiny-qwen3", 3, "cuda", prompt_len + n_new + 8, lift_positions=True)
    prompt = rng.integers(0, llm.config.vocab_size, size=prompt_len).tolist()
    params = SamplingParams(temperature=0, max_tokens=n_new, ignore_eos=True)
    graphs = llm.generate([prompt], params)[0].token_ids
    llm.runner.checked = True
    eager = llm.generate([prompt], params)[0].token_ids
    assert len(graphs) == n_new and graphs == eager


@pytest.mark.parametrize("name", ["tiny-qwen3", "qwen3-0.6b"])
def test_decode_groups_match_single_steps(name, cuda, rng):
    # k decode steps per graph launch (PDL edges between the steps inside the graph) against one
    # step per launch: the same greedy and seeded-sampling tokens, across the 128-key bucket,
    # with a tail shorter than a group
    from fixedgraph.sampling import SamplingParams
    from fixedgraph.testing.checkpoints import random_llm

    prompt = rng.integers(0, 1000, size=110).tolist()
    params = [SamplingParams(temperature=0, max_tokens=43, ignore_eos=True),
              SamplingParams(temperature=0.8, top_k=40, seed=7, max_tokens=43, ignore_eos=True)]
    outs = []
    for group in (1, 4):
        llm = random_llm(name, 3, "cuda", 256, decode_group=group)
        outs.append([llm.generate([prompt], p)[0].token_ids for p in params])
        llm.close()
    assert outs[0] == outs[1]

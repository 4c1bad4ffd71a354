"""The profiler on the GPU: eager per-node times, graph replay, and the in-graph ablation."""
from fixedgraph.profile import format_table, prefill_timing, profile_decode
from tests.model_checks import check_teacher_forced


def test_profile_decode_in_graph(cuda, tmp_path, rng):
    llm, _, _ = check_teacher_forced("tiny-qwen3", "cuda", tmp_path, rng, prompt_len=32, n_new=4, chunk=32)
    res = profile_decode(llm, context=32, reps=5, copy_gbps=1000.0, gen_tokens=8)
    entries = {n["entry"] for n in res["nodes"]}
    assert res["launches_per_step"] == len(res["nodes"]) > 0
    assert res["graph_step_gpu_us"] > 0 and res["tpot_us"] > 0 and res["host_us_per_step"] > 0
    # 8 tokens: the prefill's and 7 decode steps, launched in groups of decode_group (one bucket)
    # and the tail one by one; a gap between consecutive launches
    G = llm.runner.decode_group
    launches = 7 // G + 7 % G
    sg = res["step_gaps"]
    assert sg["steps"] == launches - 1 and 0 <= sg["median_us"] <= sg["max_us"] < 1e5
    assert res["gpu_idle_between_steps_us"] == sg["mean_us"]
    rows = res["in_graph"]
    assert {a["entry"] for a in rows} == {e for e in entries if not e.startswith("stage_meta")}
    assert sum(a["launches"] for a in rows) == len(res["nodes"]) - sum(e.startswith("stage_meta") for e in
                                                                      (n["entry"] for n in res["nodes"]))
    for a in rows:
        assert 0 < a["without_us"] < a["full_us"] * 1.5 and a["alone_us"] > 0
        assert abs(a["marginal_us"] - (a["full_us"] - a["without_us"])) < 1e-9
    assert res["flops_per_step"] == sum(n["flops"] for n in res["nodes"]) > 0
    assert all(n["tflops"] >= 0 for n in res["nodes"])
    table = format_table(res)
    assert "in the graph" in table and all(a["entry"] in table for a in rows) and "TFLOP/s" in table


def test_prefill_timing_past_the_largest_chunk(cuda, tmp_path, rng):
    # a prompt longer than the largest chunk bucket is prefilled in full chunks: one is timed
    llm, _, _ = check_teacher_forced("tiny-qwen3", "cuda", tmp_path, rng, prompt_len=32, n_new=2, chunk=32)
    big = max(llm.model.sizes.chunk_buckets)
    pf = prefill_timing(llm, 4 * big, reps=3)
    assert pf["tokens"] == pf["bucket"] == big and pf["graph_ms"] > 0 and pf["eager_ms"] > 0
    small = prefill_timing(llm, 5, reps=3)
    assert small["tokens"] == 5 and small["bucket"] >= 5

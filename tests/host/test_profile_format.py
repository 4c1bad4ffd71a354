"""The profiler's cost model and outputs (the GPU measurement itself runs in tests/gpu/bench)."""
import json

from fixedgraph.backends.base import bind
from fixedgraph.backends.reference import ReferenceDevice
from fixedgraph.models.config import ModelConfig
from fixedgraph.models.dense import DenseDecoder, Sizes
from fixedgraph.profile import by_entry, by_role, chrome_trace, format_table, node_cost, step_gaps


def decode_costs(ctx: int):
    cfg = ModelConfig(arch="qwen3", vocab_size=1000, hidden_size=256, intermediate_size=512, num_layers=2,
                      num_heads=4, num_kv_heads=2, head_dim=64)
    m = DenseDecoder(cfg, Sizes((1,), (16,), 16, 40, 512, 16))
    dev = ReferenceDevice()
    arena = dev.arena(m.plan())
    host = {"staging": dev.alloc_host(6 * m.slot_bytes), "ring": dev.alloc_host(4 * 16)}
    bound = bind(m.decode_program(1, False, m.ctx_bucket(ctx)), arena, host)
    return cfg, [(b.entry.name, *node_cost(b, ctx)) for b in bound.ops]


def test_cost_model_counts_every_weight_once():
    cfg, costs = decode_costs(100)
    H, I, V, D = 256, 512, 1000, 64
    weights = cfg.num_layers * (H * (4 + 2 * 2) * D + H * 4 * D + 2 * I * H + H * I) * 2 + V * H * 2
    gemv_bytes = sum(b for e, b, _ in costs if e.startswith("gemv"))
    assert weights <= gemv_bytes < weights * 1.05  # weights dominate; activations are small
    attn = [b for e, b, _ in costs if e.startswith("paged_attention")]
    assert len(attn) == cfg.num_layers and all(b >= 100 * 2 * D * 2 * 2 for b in attn)


def test_table_and_trace():
    nodes = [{"index": i, "label": f"L0.n{i}", "entry": e, "grid": (8, 1, 1), "block": (256, 1, 1), "us": us,
              "bytes": b, "flops": 0, "gbps": b / (us * 1e3)}
             for i, (e, us, b) in enumerate([("gemv_bf16", 10.0, 40_000_000), ("gemv_bf16", 5.0, 10_000_000),
                                             ("argmax_rows", 2.0, 600_000)])]
    res = {"context": 128, "launches_per_step": 3, "graph_step_gpu_us": 15.0, "tpot_us": 16.0,
           "gpu_idle_between_steps_us": 1.0, "host_us_per_step": 3.0, "bytes_per_step": 50_600_000,
           "copy_GBps": 4000.0, "floor_us": 12.65, "sum_node_us": 17.0, "nodes": nodes}
    assert by_entry(res)[0] == ("gemv_bf16", 2, 15.0, 50_000_000, 0)
    table = format_table(res)
    assert "gemv_bf16" in table and "84% of floor" in table
    res["in_graph"] = [{"entry": "gemv_bf16", "launches": 2, "full_us": 15.0, "without_us": 4.0, "marginal_us": 11.0,
                        "marginal_us_per_launch": 5.5, "alone_us": 12.0, "alone_us_per_launch": 6.0}]
    assert "in the graph" in format_table(res) and "5.50" in format_table(res)
    res["step_gaps"] = step_gaps([0.5, 0.25, 3.0, 0.0])
    assert res["step_gaps"]["max_us"] == 3.0 and res["step_gaps"]["median_us"] == 0.5
    assert "4 gaps" in format_table(res) and step_gaps([]) == {"steps": 0}
    trace = json.loads(chrome_trace(res))["traceEvents"]
    assert [e["ts"] for e in trace] == [0.0, 10.0, 15.0] and trace[0]["dur"] == 10.0
    assert "cluster" not in trace[0]["args"]
    nodes[1]["cluster"] = (4, 1, 1)
    assert json.loads(chrome_trace(res))["traceEvents"][1]["args"]["cluster"] == [4, 1, 1]


def test_roles_split_an_entry_by_its_jobs():
    # o_proj and down_proj share gemv_bf16_vec; layer 0's qkv runs another entry than layer 1's
    spec = [("L0.norm+qkv", "gemv_rmsnorm_bf16", 7.0, 8_000_000), ("L0.o_proj", "gemv_bf16_vec", 2.0, 4_000_000),
            ("L0.down_proj", "gemv_bf16_vec", 3.0, 6_000_000), ("L1.norm+qkv", "gemv_rmsnorm_bf16_row", 4.0, 8_000_000),
            ("L1.o_proj", "gemv_bf16_vec", 2.0, 4_000_000), ("L1.down_proj", "gemv_bf16_vec", 4.0, 6_000_000)]
    nodes = [{"index": i, "label": l, "entry": e, "grid": (8, 1, 1), "block": (256, 1, 1), "us": us, "bytes": b,
              "flops": 0, "gbps": b / (us * 1e3)} for i, (l, e, us, b) in enumerate(spec)]
    res = {"context": 128, "launches_per_step": 6, "graph_step_gpu_us": 22.0, "tpot_us": 22.0,
           "gpu_idle_between_steps_us": 1.0, "host_us_per_step": 3.0, "bytes_per_step": 36_000_000,
           "copy_GBps": 4000.0, "floor_us": 9.0, "sum_node_us": 22.0, "nodes": nodes}
    roles = {(r, e): (n, us, b) for r, e, n, us, b, _ in by_role(res)}
    assert roles[("down_proj", "gemv_bf16_vec")] == (2, 7.0, 12_000_000)
    assert roles[("o_proj", "gemv_bf16_vec")] == (2, 4.0, 8_000_000)
    assert ("norm+qkv", "gemv_rmsnorm_bf16") in roles and ("norm+qkv", "gemv_rmsnorm_bf16_row") in roles
    table = format_table(res)
    assert "down_proj (gemv_bf16_vec)" in table and "3.50" in table  # 7 us over 2 launches
    # one job per entry: no role table
    res["nodes"] = [n for n in nodes if n["entry"] != "gemv_bf16_vec"]
    assert "role (entry)" not in format_table(res)


def test_flops_and_tflops_are_reported():
    # two GEMVs of 2 * N * K FLOPs each (N=4096, K=1024) and a node without FLOPs
    nodes = [{"index": i, "label": f"L{i}.qkv", "entry": "gemv_bf16", "grid": (8, 1, 1), "block": (256, 1, 1),
              "us": us, "bytes": 8_000_000, "flops": fl, "gbps": 8_000_000 / (us * 1e3)}
             for i, (us, fl) in enumerate([(4.0, 2 * 4096 * 1024), (4.0, 2 * 4096 * 1024), (2.0, 0)])]
    res = {"context": 128, "launches_per_step": 3, "graph_step_gpu_us": 8.0, "tpot_us": 8.0,
           "gpu_idle_between_steps_us": 1.0, "host_us_per_step": 3.0, "bytes_per_step": 24_000_000,
           "copy_GBps": 4000.0, "floor_us": 6.0, "sum_node_us": 10.0, "nodes": nodes}
    assert by_entry(res)[0][4] == 4 * 4096 * 1024
    table = format_table(res)
    # 16.8 MFLOP over the 8 us step: 2.10 TFLOP/s; per entry over 10 us: 1.68
    assert "FLOPs/step 0.02 GFLOP: 2.10 TFLOP/s over the graph's step, 1.68 over" in table
    assert table.splitlines()[4].split()[-1] == "1.68"  # the entry row's TFLOP/s column
    assert "2.10 TFLOP/s grid 8" in table  # one node: 8.4 MFLOP in 4 us
    args = json.loads(chrome_trace(res))["traceEvents"][0]["args"]
    assert args["FLOPs"] == 2 * 4096 * 1024 and args["TFLOP/s"] == 2.097

"""Where a decode step's time goes: per kernel node GPU time, bytes, FLOPs, bandwidth.

The decode program is replayed eagerly with an event before every launch (no Python between
launches), many times; each node's median time is compared with the bytes it must move (each
operand once) over the measured copy bandwidth. Also: the graph's step time, the GPU idle time
between queued steps, host µs per step. Output: a table, JSON and a Chrome/Perfetto trace.

The GPU's idle time between decode steps is measured directly: during a real generation the
runner's step hook records a CUDA event just before each step's graph is enqueued and one just
after. With steps queued ahead, "before k+1" runs on the GPU right after "after k"; when the host
is late the GPU waits in between, so the time between the two events is the gap.

Eager per-node times carry launch costs that the graph's PDL chain hides, so the profiler also
measures each kernel entry *inside* the graph: the replay time of the decode graph without that
entry's launches (the difference is the entry's marginal cost in the real chain) and of a graph
of only that entry's launches (its cost when chained with itself). Data is then garbage, timing
is not: no kernel's work depends on values.
"""
from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass

import numpy as np

from fixedgraph.backends.base import Bound, BoundLaunch
from fixedgraph.backends.reference.twins import param_names
from fixedgraph.models.dense import RING, STAGING
from fixedgraph.sampling import SamplingParams


@dataclass
class NodeCost:
    index: int
    label: str
    entry: str
    grid: tuple
    block: tuple
    us: float
    bytes: int
    flops: int
    cluster: tuple = (1, 1, 1)

    @property
    def gbps(self) -> float:
        return self.bytes / (self.us * 1e3) if self.us > 0 else 0.0

    @property
    def tflops(self) -> float:
        return _tflops(self.flops, self.us)


def _tflops(flops: float, us: float) -> float:
    """TFLOP/s of ``flops`` done in ``us`` microseconds."""
    return flops / (us * 1e6) if us > 0 else 0.0


def gpu_ms(device, fn, reps: int, warmup: int = 1) -> float:
    """Mean GPU ms of ``fn()`` (something that enqueues work on ``device.stream``), timed with
    events around ``reps`` back-to-back calls after ``warmup`` untimed ones."""
    from fixedgraph import _driver as drv

    e0, e1 = drv.event_create(), drv.event_create()
    try:
        for _ in range(warmup):
            fn()
        device.synchronize()
        drv.event_record(e0, device.stream)
        for _ in range(reps):
            fn()
        drv.event_record(e1, device.stream)
        drv.event_synchronize(e1)
        return drv.event_elapsed_ms(e0, e1) / reps
    finally:
        drv.event_destroy(e0)
        drv.event_destroy(e1)


def node_cost(b: BoundLaunch, context: int) -> tuple[int, int]:
    """(bytes a launch must move, FLOPs it must do) from its entry and arguments."""
    names = param_names(b.entry.name, len(b.values)) or []
    a = dict(zip(names, b.values))
    e, rows = b.entry.name, b.op.grid[0]
    if e.startswith("gemv_rmsnorm"):
        r, N, K = a["rows"], a["N"], a["K"]
        out = 4 if e.endswith(("f32out", "argmax")) else 2  # the argmax entry also stores f32 logits
        stream = r * K * (4 + (2 if a.get("delta") else 0) + (4 if a.get("hidden_out") else 0))
        return N * K * 2 + stream + K * 2 + r * N * out + (N * 2 if a.get("bias") else 0), 2 * r * N * K
    if e == "gemv_silu_bf16":
        r, N, K = a["rows"], a["N"], a["K"]
        return N * K * 2 + r * 2 * K * 2 + r * N * 2 + (N * 2 if a.get("bias") else 0), 2 * r * N * K
    if e.startswith(("gemv_bf16", "gemm_bf16")):
        r, N, K = a.get("rows", a.get("M", 1)), a["N"], a["K"]
        out = 4 if e.endswith("f32out") else 2
        return N * K * 2 + r * K * 2 + r * N * out + (N * 2 if a.get("bias") else 0), 2 * r * N * K
    if e == "add_rmsnorm":
        H = a["H"]
        return rows * H * (8 + (2 if a.get("delta") else 0) + 2) + H * 2, rows * H * 6
    if e == "embed_gather":
        return rows * a["H"] * 6, 0
    if e == "qk_norm_rope_kv":
        r, Hq, Hkv, D = a["rows"], a["Hq"], a["Hkv"], a["D"]
        return r * (Hq + 2 * Hkv) * D * 2 + r * (Hq + 2 * Hkv) * D * 2 + r * D * 4, r * (Hq + Hkv) * D * 8
    if e.startswith("paged_attention_decode"):
        r, Hq, Hkv, D = a["rows"], a["Hq"], a["Hkv"], a["D"]
        return r * context * Hkv * D * 4 + r * Hq * D * 4, r * Hq * context * D * 4
    if e == "paged_attention_combine":
        return a["rows"] * a["Hq"] * a["num_splits"] * (a["D"] + 2) * 4 + a["rows"] * a["Hq"] * a["D"] * 2, 0
    if e == "silu_mul":
        return a["rows"] * a["I"] * 6, a["rows"] * a["I"] * 5
    if e in ("argmax_rows", "sample_rows"):
        return a["rows"] * a["V"] * 4, 0
    if e in ("stage_meta", "stage_meta_ring"):
        return a["words"] * 8, 0
    if e == "stage_meta_ring_embed":  # the slot over PCIe and into the region, then the rows
        return a["words"] * 8 + a["rows"] * a["H"] * 6, 0
    if e == "gather_rows_bf16":
        return rows * a["H"] * 4, 0
    return 0, 0


def _eager_decode(llm, context: int):
    """Place one sequence at ``context`` tokens and bind an eager width-1 decode program whose
    metadata slot describes the next step."""
    r, m = llm.runner, llm.model
    rng = np.random.default_rng(0)
    prompt = rng.integers(0, m.V, size=context).tolist()
    seq = r._next_seq
    r._next_seq += 1
    r.alloc.allocate(seq, context + 1)
    r._prefill(seq, prompt, SamplingParams(temperature=0), 0, False)
    layout = m.decode_meta[1]
    table = r.alloc.block_table(seq)
    for k in range(r.num_slots):  # every slot describes the same step: any pass may read any slot
        v = layout.views(r._slot(k)[0])
        v["positions"][0] = context
        v["slot"][0] = r.alloc.slot(seq, context)
        v["seq_len"][0] = context + 1
        v["block_table"][0, : len(table)] = table
        v["step"][0] = 1
    bound = llm.device.bind(m.decode_program(1, False, m.ctx_bucket(context + 1)), llm.arena,
                            {STAGING: r.staging, RING: r.ring})
    return seq, bound


def _kept(op, drop: str | None, only: str | None) -> bool:
    if not isinstance(op, BoundLaunch) or op.entry.name.startswith("stage_meta"):
        return True  # copies and the metadata staging always run: every kernel reads their output
    return op.entry.name != drop if only is None else op.entry.name == only


def graph_ablation(device, bound, reps: int) -> list[dict]:
    """Per kernel entry of ``bound`` (a decode program): GPU us of a graph replay without that
    entry's launches (``marginal_us`` = full - without: its cost in the real chain) and of a
    graph holding only its launches (``alone_us``), plus per-launch figures."""
    from fixedgraph.backends.cuda import CudaGraph

    def replay_us(ops) -> float:
        g = CudaGraph(device, Bound(bound.program, ops, bound.resolve))
        try:
            return gpu_ms(device, g.launch, reps, warmup=2) * 1e3
        finally:
            del g

    full = replay_us(list(bound.ops))
    entries: dict[str, int] = {}
    for op in bound.ops:
        if isinstance(op, BoundLaunch) and not op.entry.name.startswith("stage_meta"):
            entries[op.entry.name] = entries.get(op.entry.name, 0) + 1
    out = []
    for name, n in entries.items():
        without = replay_us([op for op in bound.ops if _kept(op, name, None)])
        alone = replay_us([op for op in bound.ops if _kept(op, None, name)])
        out.append({"entry": name, "launches": n, "full_us": full, "without_us": without,
                    "marginal_us": full - without, "marginal_us_per_launch": (full - without) / n,
                    "alone_us": alone, "alone_us_per_launch": alone / n})
    return out


def step_gaps(gaps_us: list[float]) -> dict:
    """Summary of the GPU's gaps between consecutive decode launches (us): each a step or a group."""
    if not gaps_us:
        return {"steps": 0}
    g = sorted(gaps_us)
    pick = lambda q: g[min(len(g) - 1, int(q * len(g)))]  # noqa: E731
    return {"steps": len(g), "mean_us": sum(g) / len(g), "median_us": pick(0.5), "p90_us": pick(0.9),
            "max_us": g[-1], "total_us": sum(g)}


def generate_with_gaps(llm, prompt: list[int], n_new: int) -> tuple[object, list[float]]:
    """Greedy-generate ``n_new`` tokens with the runner's step hook recording an event before and
    after each decode launch (a step, or a group of ``runner.decode_group`` steps); returns the
    output and the gaps (us) between consecutive launches."""
    from fixedgraph import _driver as drv

    r, stream = llm.runner, llm.device.stream
    before: dict[int, int] = {}
    after: dict[int, int] = {}

    def hook(step: int, done: bool) -> None:
        e = drv.event_create()
        drv.event_record(e, stream)
        (after if done else before)[step] = e

    r.step_hook = hook
    try:
        out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n_new, ignore_eos=True))[0]
        llm.device.synchronize()
        # consecutive launches (a launch is one step, or a decode group whose steps run inside
        # one graph with no host-visible boundary between them)
        starts = sorted(before)
        gaps = [drv.event_elapsed_ms(after[a], before[b]) * 1e3 for a, b in zip(starts, starts[1:]) if a in after]
    finally:
        r.step_hook = None
        for e in (*before.values(), *after.values()):
            drv.event_destroy(e)
    return out, gaps


def profile_decode(llm, context: int = 128, reps: int = 50, copy_gbps: float | None = None,
                   gen_tokens: int = 256, ablation: bool = True) -> dict:
    """Profile the width-1 greedy decode step of a booted CUDA ``LLM`` at ``context`` tokens."""
    from fixedgraph import _driver as drv

    dev = llm.device
    if dev.kind != "cuda":
        raise RuntimeError("profiling needs the CUDA backend")
    seq, bound = _eager_decode(llm, context)
    n = bound.oplist.n
    events = [drv.event_create() for _ in range(n + 1)]
    per_op: list[list[float]] = [[] for _ in range(n)]
    for rep in range(reps + 3):
        bound.oplist.run_timed(dev.stream, events)
        drv.event_synchronize(events[-1])
        if rep >= 3:
            for i in range(n):
                per_op[i].append(drv.event_elapsed_ms(events[i], events[i + 1]) * 1e3)
    eager_total = [sum(col) for col in zip(*per_op)]
    ablation_rows = graph_ablation(dev, bound, reps) if ablation else []
    nodes = []
    for i, b in enumerate(bound.ops):
        if not isinstance(b, BoundLaunch):
            continue
        nbytes, flops = node_cost(b, context + 1)
        nodes.append(NodeCost(i, b.op.label, b.entry.name, b.op.grid, b.op.block, statistics.median(per_op[i]),
                              nbytes, flops, b.op.cluster))
    # the graph itself: GPU time of a replay, then steady-state generation
    g = llm.runner.decode_graph(context + 1)
    graph_us = gpu_ms(dev, g.launch, reps, warmup=0) * 1e3
    llm.runner.alloc.free(seq)
    llm.runner.resync()
    for e in events:
        drv.event_destroy(e)
    # The generation below runs steps at contexts context+1 .. context+gen_tokens, mostly in a
    # larger bucket than `context` and with more keys: compare its time per token with a replay
    # at the window's middle context, so the difference is the GPU's idle time between steps.
    mid = context + max(1, gen_tokens // 2)
    seq_mid, _ = _eager_decode(llm, mid)
    gen_graph_us = gpu_ms(dev, llm.runner.decode_graph(mid + 1).launch, reps, warmup=0) * 1e3
    llm.runner.alloc.free(seq_mid)
    llm.runner.resync()
    r = llm.runner
    r.reset_host_stats()
    prompt = np.random.default_rng(1).integers(0, llm.model.V, size=context).tolist()
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=gen_tokens, ignore_eos=True))[0]
    tpot_us = out.metrics.tpot_s * 1e6
    host = r.host_step_stats()
    _, gaps = generate_with_gaps(llm, prompt, gen_tokens)  # a second run: events cost host time
    gap_stats = step_gaps(gaps)
    total_bytes = sum(x.bytes for x in nodes)
    res = {
        "context": context, "launches_per_step": len(nodes), "graph_nodes": g.num_nodes,
        "graph_step_gpu_us": graph_us, "eager_step_gpu_us": statistics.median(eager_total),
        "sum_node_us": sum(x.us for x in nodes), "tpot_us": tpot_us,
        "graph_step_gpu_us_mid_window": gen_graph_us, "mid_window_context": mid,
        "gpu_idle_between_steps_us": gap_stats.get("mean_us", float("nan")),
        "step_gaps": gap_stats,
        "gpu_idle_tpot_minus_replay_us": max(0.0, tpot_us - gen_graph_us),
        "host_us_per_step": host.get("mean_us", float("nan")),
        "host_us_per_step_median": host.get("median_us", float("nan")),
        "host_launch_us_median": host.get("launch_median_us", float("nan")),  # of which the launch call
        "host_cpu_us_per_step": host.get("cpu_mean_us", float("nan")),  # the thread's CPU time for it
        "host_step_us": host,
        "bytes_per_step": total_bytes, "copy_GBps": copy_gbps,
        "floor_us": total_bytes / (copy_gbps * 1e3) if copy_gbps else None,
        "flops_per_step": sum(x.flops for x in nodes),
        "nodes": [dict(asdict(x), gbps=x.gbps, tflops=x.tflops) for x in nodes],
        "in_graph": ablation_rows,
    }
    return res


def _totals(res: dict, key) -> dict:
    """key(node) -> [launches, us, bytes, FLOPs] summed over the nodes with that key."""
    agg: dict = {}
    for x in res["nodes"]:
        a = agg.setdefault(key(x), [0, 0.0, 0, 0])
        a[0] += 1
        a[1] += x["us"]
        a[2] += x["bytes"]
        a[3] += x.get("flops", 0)
    return agg


def by_entry(res: dict) -> list[tuple[str, int, float, int, int]]:
    """(entry, launches, us, bytes, FLOPs) per kernel entry, slowest first."""
    agg = _totals(res, lambda x: x["entry"])
    return sorted(((k, *v) for k, v in agg.items()), key=lambda t: -t[2])


def by_role(res: dict) -> list[tuple[str, str, int, float, int, int]]:
    """(role, entry, launches, us, bytes, FLOPs) per role in a layer: the node's label without its layer
    prefix (``fixedgraph.timeline.role``), with the entry, so that launches of one entry that do
    different jobs (o_proj and down_proj, both ``gemv_bf16_vec``) and a job done by another entry
    in one layer (layer 0's norm + qkv) are apart; slowest first."""
    from fixedgraph.timeline import role

    agg = _totals(res, lambda x: (role(x["label"] or x["entry"]), x["entry"]))
    return sorted(((r, e, *v) for (r, e), v in agg.items()), key=lambda t: -t[3])


def format_table(res: dict, top: int = 25) -> str:
    bw = res.get("copy_GBps") or 0
    total = res["sum_node_us"]
    lines = [f"decode step at context {res['context']}: graph {res['graph_step_gpu_us']:.1f} us GPU, "
             f"tpot {res['tpot_us']:.1f} us vs graph {res.get('graph_step_gpu_us_mid_window', float('nan')):.1f} us "
             f"at context {res.get('mid_window_context', '?')}: idle between steps "
             f"{res['gpu_idle_between_steps_us']:.1f} us, host {res['host_us_per_step']:.1f} us/step "
             f"(median {res.get('host_us_per_step_median', float('nan')):.1f}, of which the launch call "
             f"{res.get('host_launch_us_median', float('nan')):.1f}; CPU {res.get('host_cpu_us_per_step', float('nan')):.1f}), "
             f"{res['launches_per_step']} launches"]
    sg = res.get("step_gaps") or {}
    if sg.get("steps"):
        lines.append(f"GPU gaps between decode launches (events, {sg['steps']} gaps): mean {sg['mean_us']:.1f} us, "
                     f"median {sg['median_us']:.1f}, p90 {sg['p90_us']:.1f}, max {sg['max_us']:.1f}; "
                     f"tpot - replay {res.get('gpu_idle_tpot_minus_replay_us', float('nan')):.1f} us")
    if res.get("floor_us"):
        lines.append(f"bytes/step {res['bytes_per_step'] / 1e6:.1f} MB; floor {res['floor_us']:.1f} us at "
                     f"{bw:.0f} GB/s; graph at {res['floor_us'] / res['graph_step_gpu_us'] * 100:.0f}% of floor")
    flops = sum(x.get("flops", 0) for x in res["nodes"])
    lines.append(f"FLOPs/step {flops / 1e9:.2f} GFLOP: {_tflops(flops, res['graph_step_gpu_us']):.2f} TFLOP/s over "
                 f"the graph's step, {_tflops(flops, total):.2f} over the eager nodes' sum")
    def rates(us: float, nbytes: int, fl: int) -> str:  # GB/s, share of the copy bandwidth, TFLOP/s
        gbps = nbytes / (us * 1e3) if us else 0
        return f"{gbps:>7.0f} {gbps / bw * 100 if bw else 0:>5.0f}% {_tflops(fl, us):>8.2f}"

    entries = by_entry(res)
    lines.append(f"{'entry':<28} {'n':>4} {'us':>9} {'share':>6} {'GB/s':>7} {'of bw':>6} {'TFLOP/s':>8}")
    for entry, n, us, nbytes, fl in entries:
        lines.append(f"{entry:<28} {n:>4} {us:>9.1f} {us / total * 100:>5.1f}% {rates(us, nbytes, fl)}")
    roles = by_role(res)
    if len(roles) > len(entries):  # some entry does several jobs: the same time per role
        lines.append(f"{'role (entry)':<58} {'n':>4} {'us':>9} {'per launch':>10} {'GB/s':>7} {'of bw':>6} "
                     f"{'TFLOP/s':>8}")
        for r, entry, n, us, nbytes, fl in roles:
            lines.append(f"{(r + ' (' + entry + ')')[:58]:<58} {n:>4} {us:>9.1f} {us / n:>10.2f} {rates(us, nbytes, fl)}")
    if res.get("in_graph"):
        lines.append("in the graph (replay without an entry's launches / with only them), us:")
        lines.append(f"{'entry':<28} {'n':>4} {'marginal':>9} {'per launch':>10} {'alone':>9} {'per launch':>10}")
        for a in sorted(res["in_graph"], key=lambda a: -a["marginal_us"]):
            lines.append(f"{a['entry']:<28} {a['launches']:>4} {a['marginal_us']:>9.1f} "
                         f"{a['marginal_us_per_launch']:>10.2f} {a['alone_us']:>9.1f} {a['alone_us_per_launch']:>10.2f}")
    lines.append("slowest nodes:")
    for x in sorted(res["nodes"], key=lambda x: -x["us"])[:top]:
        lines.append(f"  {x['index']:>4} {x['label'][:30]:<30} {x['entry']:<26} {x['us']:>8.1f} us "
                     f"{x['gbps']:>6.0f} GB/s {_tflops(x.get('flops', 0), x['us']):>6.2f} TFLOP/s grid {x['grid'][0]}")
    return "\n".join(lines)


def chrome_trace(res: dict) -> str:
    """The eager per-node timeline as a Chrome/Perfetto trace (open in ui.perfetto.dev)."""
    t, events = 0.0, []
    for x in res["nodes"]:
        args = {"bytes": x["bytes"], "GB/s": round(x["gbps"], 1), "FLOPs": x.get("flops", 0),
                "TFLOP/s": round(_tflops(x.get("flops", 0), x["us"]), 3), "grid": list(x["grid"])}
        if any(c > 1 for c in x.get("cluster", ())):
            args["cluster"] = list(x["cluster"])
        events.append({"name": x["label"] or x["entry"], "cat": x["entry"], "ph": "X", "ts": t, "dur": x["us"],
                       "pid": 0, "tid": 0, "args": args})
        t += x["us"]
    return json.dumps({"traceEvents": events, "displayTimeUnit": "ns"})


def prefill_timing(llm, tokens: int = 128, reps: int = 20) -> dict:
    """GPU ms of one prefill chunk of ``tokens`` tokens run as its graph vs eagerly through the
    Cython launch loop (the same bound program), on the CUDA backend. A prompt longer than the
    largest chunk bucket is prefilled in chunks of that bucket: one such full chunk is timed
    (``tokens`` in the result says how many)."""
    r, m, dev = llm.runner, llm.model, llm.device
    if tokens < 1:
        raise ValueError(f"prefill_timing: tokens must be >= 1, got {tokens}")
    tokens = min(tokens, max(m.sizes.chunk_buckets))
    T = next(b for b in m.sizes.chunk_buckets if b >= tokens)
    seq = r._next_seq
    r._next_seq += 1
    r.alloc.allocate(seq, tokens)
    table = r.alloc.block_table(seq)
    layout = m.prefill_meta[T]
    pos = np.arange(tokens)
    for k in range(r.num_slots):  # every slot holds the same chunk: any pass may read any slot
        v = layout.views(r._slot(k)[0])
        v["tokens"][:] = 0
        v["tokens"][:tokens] = np.random.default_rng(k).integers(0, m.V, size=tokens)
        v["positions"][:] = tokens - 1
        v["positions"][:tokens] = pos
        v["slot"][:] = -1
        v["slot"][:tokens] = np.asarray(table)[pos // m.sizes.block_size] * m.sizes.block_size + pos % m.sizes.block_size
        v["block_table"][0, : len(table)] = table
        v["last_row"][0] = tokens - 1
        v["step"][0] = 0
    graph = r.graphs.prefill[(T, False)]
    bound = dev.bind(m.prefill_program(T, False), llm.arena, {STAGING: r.staging, RING: r.ring})
    out = {"tokens": tokens, "bucket": T, "launches": bound.oplist.n, "graph_ms": gpu_ms(dev, graph.launch, reps),
           "eager_ms": gpu_ms(dev, lambda: dev.run(bound), reps)}
    r.alloc.free(seq)
    r.resync()
    return out

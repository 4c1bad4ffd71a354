#!/usr/bin/env python3
"""Batch-1 decode speed on the GPU: fixedgraph vs PyTorch peers on the same random weights.

    python tools/bench.py [--models qwen3-0.6b,qwen3-8b] [--prompt 128] [--new 512] [--json out.json]

For each model shape: a transformers model with random bf16 weights is built on the GPU; the
same tensors are loaded into fixedgraph's arena. Reported per model: fixedgraph ms/token and
tok/s (wall, 512 greedy tokens, steps queued ahead), GPU ms per decode graph replay, the floor
(weight bytes / copy bandwidth measured in this run) and the fraction of it reached, host CPU
µs per step, and the peers: transformers eager generate and a static-KV decode loop captured in
a CUDA graph, the same loop compiled by torch.compile (tools/peers.py). Greedy tokens are compared.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tools"))

import numpy as np  # noqa: E402
import torch  # noqa: E402

import peers  # noqa: E402
from fixedgraph.engine import LLM  # noqa: E402
from fixedgraph.hostcpu import allowed_cpus, format_cpus, speed_probe  # noqa: E402
from fixedgraph.models.config import ModelConfig  # noqa: E402
from fixedgraph.profile import gpu_ms  # noqa: E402
from fixedgraph.sampling import SamplingParams  # noqa: E402
from fixedgraph.testing.checkpoints import random_model  # noqa: E402
from fixedgraph.weights.state_dict_source import StateDictSource  # noqa: E402


PEERS = ("hf_eager", "torch_graph", "torch_compile")


def graph_replay_ms(llm: LLM, reps: int = 200) -> float:
    """GPU time of one decode graph replay (fixed metadata: the last step's staging slot)."""
    r = llm.runner
    g = r.decode_graph(llm.model.sizes.max_model_len)  # the longest-context bucket
    ms = gpu_ms(llm.device, g.launch, reps, warmup=0)
    r.resync()
    return ms


def _cpu_stat() -> list[int]:
    """The machine's CPU jiffies (user nice system idle iowait irq softirq steal), /proc/stat."""
    try:
        return [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:9]]
    except (OSError, ValueError, IndexError):
        return []


def _cpu_share(a: list[int], b: list[int]) -> dict:
    if not a or not b:
        return {}
    d = [y - x for x, y in zip(a, b)]
    total = max(1, sum(d))
    names = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
    return {f"{n}_pct": 100.0 * v / total for n, v in zip(names, d)}


def _threads() -> int:
    try:
        return int(next(ln.split()[1] for ln in Path("/proc/self/status").read_text().splitlines()
                        if ln.startswith("Threads:")))
    except (OSError, StopIteration, ValueError):
        return -1


def bench_model(name: str, prompt_len: int, n_new: int, copy_gbps: float, seed: int,
                profile_dir: str | None = None, peer_names: tuple[str, ...] = PEERS,
                lookaheads: tuple[int, ...] = (), prefill_chunk: int | None = None,
                context: int | None = None) -> dict:
    hf = random_model(name, seed, device="cuda", dtype="bfloat16")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    t0 = time.perf_counter()
    # The engine's context: just past the run's tokens unless --context asks for more (the decode
    # then runs in the context bucket a deployment with that context would use).
    max_model_len = max(prompt_len + n_new + 16, context or 0)
    llm = LLM(weights=(StateDictSource(hf.state_dict(), name), cfg), backend="cuda",
              max_model_len=max_model_len, prefill_chunk=prefill_chunk, progress=False)
    boot_s = time.perf_counter() - t0
    prompt = np.random.default_rng(seed).integers(0, cfg.vocab_size, size=prompt_len).tolist()
    params = SamplingParams(temperature=0, max_tokens=n_new, ignore_eos=True)
    llm.generate([prompt], SamplingParams(temperature=0, max_tokens=32, ignore_eos=True))  # warm up
    llm.runner.reset_host_stats()
    speed0 = speed_probe()  # this thread's CPU speed just before and after the timed decode
    cpu0, stat0 = time.process_time(), _cpu_stat()
    out = llm.generate([prompt], params)[0]
    cpu, stat1 = time.process_time() - cpu0, _cpu_stat()
    speed1 = speed_probe()
    m = out.metrics
    weight_bytes = llm.weight_bytes
    floor_ms = weight_bytes / (copy_gbps * 1e9) * 1e3
    # what a step must also read at long contexts: every layer's K and V (bf16) of the keys so
    # far, here at the decode's mean context
    c = llm.config
    kv_bytes = c.num_layers * 2 * c.num_kv_heads * c.head_dim * 2 * (prompt_len + n_new / 2)
    floor_kv_ms = (weight_bytes + kv_bytes) / (copy_gbps * 1e9) * 1e3
    host = llm.runner.host_step_stats()
    replay_ms = graph_replay_ms(llm)
    res = {
        "model": name, "weight_GB": weight_bytes / 1e9, "boot_s": boot_s, "max_model_len": max_model_len,
        "fixedgraph_ms_per_token": m.tpot_s * 1e3, "fixedgraph_tok_per_s": m.tokens_per_s,
        "fixedgraph_ttft_ms": m.ttft_s * 1e3, "prefill_chunk": llm.prefill_chunk, "graph_replay_gpu_ms": replay_ms,
        "floor_ms": floor_ms, "fraction_of_floor": floor_ms / (m.tpot_s * 1e3),  # weights only
        "kv_GB_per_step": kv_bytes / 1e9, "floor_with_kv_ms": floor_kv_ms,
        "fraction_of_floor_with_kv": floor_kv_ms / (m.tpot_s * 1e3),
        "host_us_per_step": host.get("mean_us", float("nan")),
        "host_us_per_step_median": host.get("median_us", float("nan")),
        "host_launch_us_median": host.get("launch_median_us", float("nan")),  # of which cuGraphLaunch
        # the loop thread's CPU time (its thread clock) for the same work: blocked or preempted time not in it
        "host_cpu_us_per_step": host.get("cpu_mean_us", float("nan")),
        "host_cpu_us_per_step_median": host.get("cpu_median_us", float("nan")),
        "host_step_us": host,
        "process_cpu_us_per_step_incl_wait": cpu / max(1, len(out.token_ids)) * 1e6,
        "decode_nodes": llm.runner.decode_graph(prompt_len + 1).num_nodes,
        "decode_group": llm.runner.decode_group,  # decode steps per graph launch (FIXEDGRAPH_DECODE_GROUP)
        # where the decode loop ran: its thread's CPUs (FIXEDGRAPH_CPU_AFFINITY), the process's
        # threads, and the machine's CPU time over the decode (steal: a hypervisor ran others)
        "host_cpus": format_cpus(allowed_cpus()), "process_threads": _threads(),
        "wait_mode": llm.runner.wait_mode,  # FIXEDGRAPH_WAIT: spin, or sleep through long steps
        "machine_cpu_during_decode": _cpu_share(stat0, stat1),
        # fixed host work (numpy slot stores, no driver) timed just before and after the decode
        # in its thread: a slow host step with a slow probe is the CPU running slowly, not the step
        "host_speed_probe": {"before": speed0, "after": speed1},
        "host_probe_ns_median": (speed0["wall_ns_median"] + speed1["wall_ns_median"]) / 2,
    }
    ours = out.token_ids
    if lookaheads:  # the same generation with fewer / more steps queued ahead of the GPU
        default = llm.runner.lookahead
        sweep = []
        for k in lookaheads:
            llm.runner.lookahead = max(1, min(k, llm.runner.max_lookahead))  # within the planned slots
            llm.runner.reset_host_stats()
            o = llm.generate([prompt], params)[0]
            h = llm.runner.host_step_stats()
            sweep.append({"lookahead": llm.runner.lookahead, "ms_per_token": o.metrics.tpot_s * 1e3,
                          "host_us_mean": h.get("mean_us"), "host_us_median": h.get("median_us"),
                          "host_us_p90": h.get("p90_us"), "tokens_equal": o.token_ids == ours})
            print(f"  lookahead {sweep[-1]['lookahead']}: {sweep[-1]['ms_per_token']:.4f} ms/token, host us "
                  f"median {h.get('median_us', float('nan')):.1f} p90 {h.get('p90_us', float('nan')):.1f}", flush=True)
        llm.runner.lookahead = default
        res["lookahead_sweep"] = sweep
    if profile_dir:
        from fixedgraph.profile import chrome_trace, format_table, profile_decode

        prof = profile_decode(llm, context=prompt_len, copy_gbps=copy_gbps, gen_tokens=128)
        print(format_table(prof), flush=True)
        Path(profile_dir).mkdir(parents=True, exist_ok=True)
        Path(profile_dir, f"profile_{name}.json").write_text(json.dumps(prof, indent=1, default=str))
        Path(profile_dir, f"trace_{name}.json").write_text(chrome_trace(prof))
        res["profile_graph_step_gpu_us"] = prof["graph_step_gpu_us"]
        res["profile_idle_between_steps_us"] = prof["gpu_idle_between_steps_us"]
        from fixedgraph.profile import prefill_timing

        pf = prefill_timing(llm, prompt_len)
        res["prefill_graph_ms"], res["prefill_eager_ms"] = pf["graph_ms"], pf["eager_ms"]
        print(f"prefill {pf['tokens']} tokens ({pf['launches']} launches): graph {pf['graph_ms']:.3f} ms, "
              f"eager {pf['eager_ms']:.3f} ms", flush=True)
    llm.close()
    del llm, hf
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    for peer in peer_names:  # each in its own process: a device-side assert there cannot end this run
        r = run_peer(peer, name, seed, prompt, n_new)
        if "error" in r:
            res[f"{peer}_error"] = r["error"]
            continue
        res[f"{peer}_ms_per_token"] = r["ms_per_token"]
        res[f"{peer}_tok_per_s"] = r["tok_per_s"]
        if "warmup_s" in r:
            res[f"{peer}_warmup_s"] = r["warmup_s"]
        res[f"{peer}_tokens_agree_prefix"] = next(
            (i for i, (a, b) in enumerate(zip(ours, r["tokens"])) if a != b), min(len(ours), len(r["tokens"])))
    return res


def run_peer(peer: str, model: str, seed: int, prompt: list[int], n_new: int, timeout_s: float = 300) -> dict:
    """Run tools/peers.py for one peer on the same random model (same name and seed: same weights)."""
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        args = Path(d, "args.json")
        args.write_text(json.dumps({"peer": peer, "model": model, "seed": seed, "prompt": prompt, "n_new": n_new}))
        out = Path(d, "out.json")
        try:
            proc = subprocess.run([sys.executable, str(ROOT / "tools/peers.py"), str(args), str(out)],
                                  capture_output=True, text=True, timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:.0f} s"}
        if proc.returncode or not out.exists():
            tail = [l for l in (proc.stderr or "").splitlines() if "Assertion" not in l][-6:]
            return {"error": f"exit {proc.returncode}: " + " | ".join(tail)[-600:]}
        return json.loads(out.read_text())


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-0.6b,qwen3-8b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=512)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json")
    ap.add_argument("--peers", default=",".join(PEERS), help="comma-separated, from " + ", ".join(PEERS))
    ap.add_argument("--lookahead-sweep", default="",
                    help="comma-separated decode lookaheads to re-run the generation with (host time vs queue depth)")
    ap.add_argument("--prefill-chunk", type=int, help="tokens per prefill pass (default: the engine's)")
    ap.add_argument("--context", type=int,
                    help="the engine's context (max_model_len) when larger than prompt + new + 16: the "
                         "decode then runs in that deployment's context bucket, not one fitted to the run")
    ap.add_argument("--profile-dir", help="also profile each model's decode step; write JSON + traces here")
    args = ap.parse_args()
    commit = os.environ.get("FIXEDGRAPH_COMMIT") or subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    copy_gbps = peers.copy_bandwidth_GBps()
    results = {"commit": commit or "unknown", "device": torch.cuda.get_device_name(), "copy_GBps": copy_gbps,
               "prompt": args.prompt, "new_tokens": args.new, "models": []}
    for name in args.models.split(","):
        res = bench_model(name, args.prompt, args.new, copy_gbps, args.seed, args.profile_dir,
                          tuple(p for p in args.peers.split(",") if p),
                          tuple(int(k) for k in args.lookahead_sweep.split(",") if k), args.prefill_chunk,
                          args.context)
        results["models"].append(res)
        print(json.dumps(res, indent=1), flush=True)
    print(f"\ncopy bandwidth {copy_gbps:.0f} GB/s   prompt {args.prompt}   new {args.new}   TTFT ms: "
          + ", ".join(f"{r['model']} {r['fixedgraph_ttft_ms']:.1f} (chunk {r['prefill_chunk']})" for r in results["models"]))
    hdr = (f"{'model':<12} {'ours ms/tok':>11} {'floor ms':>9} {'of floor':>8} {'host us':>8} {'median':>6} {'launch':>6} {'cpu us':>6} {'idle us':>8} "
           f"{'hf eager':>9} {'torch graph':>11} {'compile+graph':>13}")
    print(hdr)
    nan = float("nan")
    for r in results["models"]:
        print(f"{r['model']:<12} {r['fixedgraph_ms_per_token']:>11.3f} {r['floor_ms']:>9.3f} "
              f"{r['fraction_of_floor']:>8.2f} {r['host_us_per_step']:>8.1f} {r.get('host_us_per_step_median', nan):>6.1f} "
              f"{r.get('host_launch_us_median', nan):>6.1f} {r.get('host_cpu_us_per_step', nan):>6.1f} "
              f"{r.get('profile_idle_between_steps_us', nan):>8.1f} "
              f"{r.get('hf_eager_ms_per_token', nan):>9.3f} {r.get('torch_graph_ms_per_token', nan):>11.3f} "
              f"{r.get('torch_compile_ms_per_token', nan):>13.3f}")
        if r["kv_GB_per_step"] * 1e9 > 0.1 * r["weight_GB"] * 1e9:  # long contexts: the floor with K/V reads
            print(f"  with K/V ({r['kv_GB_per_step']:.2f} GB a step at the mean context): floor "
                  f"{r['floor_with_kv_ms']:.3f} ms, ours at {r['fraction_of_floor_with_kv']:.2f} of it")
        for peer in PEERS:
            if f"{peer}_error" in r:
                print(f"  {peer}: {r[peer + '_error']}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

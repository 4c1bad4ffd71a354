#!/usr/bin/env python3
"""Where a persistent decode step's time goes (FIXEDGRAPH_MEGA=1, ptx/src/mega.cu).

Boots a random-weight model with the persistent step, turns on the kernel's marks (when each CTA
left each op), decodes, and reads the last step's marks. For each op the critical path's share is
the time from the last CTA leaving the op before to the last CTA leaving this one; the table sums
those shares by op kind over the step (and gives their median a layer), with the span from the
first CTA past its PDL wait to the last CTA done. The same run's ms/token comes from the engine.

    python3 tools/bench_mega.py [--models qwen3-0.6b] [--prompt 128] [--new 256] [--json PATH]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def profile(name: str, prompt: int, new: int, seed: int = 0) -> dict:
    os.environ["FIXEDGRAPH_MEGA"] = "1"
    from fixedgraph.ops import mega
    from fixedgraph.sampling import SamplingParams
    from fixedgraph.testing.checkpoints import random_llm

    llm = random_llm(name, seed, backend="cuda", max_model_len=prompt + new + 8, prefill_chunk=256,
                     lift_positions=True)
    if llm.model.mega is None:
        raise SystemExit(f"{name}: decode_mega does not take this model ({mega.unsupported(llm.config)})")
    table = llm.model.boot_tables(llm.plan)["mega.table"]
    llm.arena.write("mega.table", mega.with_marks(table, llm.plan))
    rng = np.random.default_rng(seed)
    toks = rng.integers(0, llm.config.vocab_size, prompt).tolist()
    params = SamplingParams(temperature=0, max_tokens=new, ignore_eos=True)
    llm.generate([toks], params)  # warm
    out = llm.generate([toks], params)[0]
    ms_tok = out.metrics.tpot_s * 1e3
    llm.device.synchronize()
    s = llm.model.mega
    nops = mega.num_ops(s)
    marks = llm.arena.read("mega.marks").view(np.uint64).reshape(nops + 1, s.num_sms).astype(np.int64)
    ops = table[mega.HDR:].reshape(-1, mega.OPW)[:nops]
    start = int(marks[nops].min())
    last = marks[:nops].max(axis=1) - start  # ns: the last CTA to leave each op
    share = np.diff(np.concatenate([[0], last]))
    kinds: dict[str, list[float]] = {}
    for j in range(nops):
        kinds.setdefault(mega.KIND_NAMES[int(ops[j, 0])] + ("" if j % 6 != 5 or j >= 6 * s.layers else " (down)"),
                         []).append(share[j] / 1e3)
    llm.close()
    return {"model": name, "prompt": prompt, "new": new, "ms_per_token_wall": ms_tok,
            "span_us": float(last[-1]) / 1e3,
            "ops": {k: {"sum_us": float(np.sum(v)), "median_us": float(np.median(v)), "count": len(v)}
                    for k, v in kinds.items()}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen3-0.6b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--json")
    a = ap.parse_args()
    res = []
    for name in a.models.split(","):
        r = profile(name, a.prompt, a.new)
        res.append(r)
        print(f"{name}: prompt {a.prompt}, the last of {a.new} steps: span {r['span_us']:.1f} us "
              f"(wall {r['ms_per_token_wall']:.4f} ms/token)")
        print(f"  {'op':<26} {'sum us':>9} {'median':>8} {'count':>6}")
        for k, v in r["ops"].items():
            print(f"  {k:<26} {v['sum_us']:9.1f} {v['median_us']:8.2f} {v['count']:6d}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

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


def profile(name: str, prompt: int, new: int, seed: int = 0, backend: str = "cuda") -> dict:
    saved = os.environ.get("FIXEDGRAPH_MEGA")
    os.environ["FIXEDGRAPH_MEGA"] = "1"  # for this model's boot only: restored below
    try:
        return _profile(name, prompt, new, seed, backend)
    finally:
        if saved is None:
            os.environ.pop("FIXEDGRAPH_MEGA", None)
        else:
            os.environ["FIXEDGRAPH_MEGA"] = saved


def _profile(name: str, prompt: int, new: int, seed: int, backend: str) -> dict:
    from fixedgraph.ops import mega
    from fixedgraph.sampling import SamplingParams
    from fixedgraph.testing.checkpoints import random_llm

    llm = random_llm(name, seed, backend=backend, max_model_len=prompt + new + 8, prefill_chunk=256,
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
    allmarks = llm.arena.read("mega.marks").view(np.uint64).astype(np.int64)
    marks = allmarks[: nops + 1]
    ops = table[mega.HDR:mega.HDR + mega.OPW * nops].reshape(nops, mega.OPW)
    start = int(marks[nops].min())
    # the attention ops' phases, over the CTAs that held an item this step (their sub-marks are fresh)
    phases = ["K/V loads issued", "q / k / v read", "QK-norm + RoPE", "keys", "warps merged, stored",
              "to the op's end"]
    spans: dict[str, list[float]] = {p: [] for p in phases}
    late: dict[str, list[float]] = {p: [] for p in phases}  # the last CTA's mark, after the op before's last
    for j in range(nops):
        if int(ops[j, 0]) != mega.MK_ATTN:
            continue
        sub = allmarks[nops + 1 + 5 * j: nops + 6 + 5 * j]  # [5][G]
        items = sub[0] >= start
        if not items.any():
            continue
        t = np.vstack([marks[j - 1][None], sub, marks[j][None]])[:, items]  # [7][items]
        prev_last = marks[j - 1].max()
        for k, name in enumerate(phases):
            spans[name].extend(((t[k + 1] - t[k]) / 1e3).tolist())
            late[name].append((t[k + 1].max() - prev_last) / 1e3)
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
                    for k, v in kinds.items()},
            "attention_phases": {k: {"median_us": float(np.median(spans[k])) if spans[k] else None,
                                     "last_after_op_before_us": float(np.median(late[k])) if late[k] else None}
                                 for k in phases}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="qwen3-0.6b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--json")
    ap.add_argument("--backend", default="cuda", help="reference: a smoke run of this tool (the twin writes no marks)")
    a = ap.parse_args()
    res = []
    for name in a.models.split(","):
        r = profile(name, a.prompt, a.new, backend=a.backend)
        res.append(r)
        print(f"{name}: prompt {a.prompt}, the last of {a.new} steps: span {r['span_us']:.1f} us "
              f"(wall {r['ms_per_token_wall']:.4f} ms/token)")
        print(f"  {'op':<26} {'sum us':>9} {'median':>8} {'count':>6}")
        for k, v in r["ops"].items():
            print(f"  {k:<26} {v['sum_us']:9.1f} {v['median_us']:8.2f} {v['count']:6d}")
        print(f"  attention phases: {'median us':>10} {'last CTA, us after the qkv op':>30}")
        for k, v in r["attention_phases"].items():
            if v["median_us"] is not None:
                print(f"  {k:<26} {v['median_us']:10.2f} {v['last_after_op_before_us']:30.2f}")
    if a.json:
        Path(a.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""What fits beside what on an SM, launch after launch of a model's decode step (no GPU).

    python3 tools/neighbours.py [--models qwen3-0.6b] [--context 4096] [--all]

Builds the decode program of each model's random-weight config (host only, as the engine plans
it at that context; knobs such as FIXEDGRAPH_ATTN_SWAP apply), takes every entry's registers and
static shared memory from ``ptxas -v`` on the committed PTX (sm_90, the driver JIT's target),
and prints for each distinct pair of consecutive launches how many CTAs of the later one fit on
an SM holding k CTAs of the earlier one (k = 0, 1, ...). Under PDL a launch's CTAs start while
its predecessor's are resident, so these counts decide where they land (fixedgraph/residency.py;
session 35 in docs/BENCHMARKS.md). --all lists every launch instead of each distinct pair once.
Needs ptxas (the CUDA toolkit).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-0.6b")
    ap.add_argument("--context", type=int, default=4096, help="keys in the decode step (its context bucket plans it)")
    ap.add_argument("--all", action="store_true", help="every launch, not each distinct pair once")
    a = ap.parse_args()
    from fixedgraph import ptx, residency
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.models.dense import DenseDecoder, Sizes
    from fixedgraph.testing.checkpoints import hf_config

    try:
        table = {}
        for path in ptx.module_paths().values():
            table.update(residency.ptxas_footprints(path))
    except (FileNotFoundError, RuntimeError) as e:
        print(f"neighbours: {e}", file=sys.stderr)
        return 2
    for name in a.models.split(","):
        cfg = ModelConfig.from_hf_dict(hf_config(name).to_dict())
        max_len = max(a.context + 64, 1024)
        sizes = Sizes(widths=(1,), chunk_buckets=(16,), block_size=16, num_blocks=-(-max_len // 16) + 1,
                      max_model_len=max_len, ring_len=16)
        dec = DenseDecoder(cfg, sizes)
        prog = dec.decode_program(1, False, dec.ctx_bucket(a.context))
        rows = residency.neighbour_rows(prog.launches, table)
        if not a.all:
            seen, distinct = set(), []
            for r in rows:
                key = (r["entry"], r["prev"].split(".")[-1], r["regs"], r["threads"], r["smem"], r["prev_regs"])
                if key not in seen:
                    seen.add(key)
                    distinct.append(r)
            rows = distinct
        print(f"\n{name}, decode step at {a.context} keys ({len(prog.launches)} launches; ptxas sm_90 footprints):")
        print(residency.format_rows(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())

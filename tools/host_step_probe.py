#!/usr/bin/env python3
"""The runner's own host cost per decode step, without the driver: a tiny random model on the
reference backend with every decode graph launch made a no-op and each token returned at once,
so what is timed is the decode loop's own host work (the metadata writes in C, the Python
that picks the graph and grows the block table, the time records).

    python tools/host_step_probe.py [--steps 1000]

Runs anywhere (no GPU). On the GPU the step adds one cuGraphLaunch (tools/bench_runtime.py).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fixedgraph.engine import LLM  # noqa: E402
from fixedgraph.models.config import ModelConfig  # noqa: E402
from fixedgraph.sampling import SamplingParams  # noqa: E402
from fixedgraph.testing.checkpoints import random_model  # noqa: E402
from fixedgraph.weights.state_dict_source import StateDictSource  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=1000)
    args = ap.parse_args()
    hf = random_model("tiny-llama", 11, dtype="bfloat16")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    n = min(args.steps, cfg.max_position_embeddings - 8)
    llm = LLM(weights=(StateDictSource(hf.state_dict()), cfg), backend="reference", max_model_len=n + 8,
              prefill_chunk=32, progress=False)
    r = llm.runner
    for g in [*r.graphs.decode.values(), *r.graphs.decode_group.values()]:  # single steps and groups
        g.launch = lambda: None
    r._wait_token = lambda step, row=0, width=1: 1
    r.reset_host_stats()
    llm.generate([[1, 2, 3, 4, 5]], SamplingParams(max_tokens=n, ignore_eos=True))
    stats = r.host_step_stats()
    print(json.dumps(stats))
    print(f"host work per decode step (launch stubbed): median {stats['median_us']:.2f} us, "
          f"p90 {stats['p90_us']:.2f}, mean {stats['mean_us']:.2f} over {stats['steps']} steps")
    llm.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

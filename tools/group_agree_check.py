"""Greedy tokens of one random model: fixedgraph with decode groups of 1 and of 4, and
transformers eager (bf16) on the same weights (GPU). Prints where each pair first parts.

    python3 tools/group_agree_check.py [--model qwen3-8b] [--prompt 128] [--new 128] [--hf-new 32]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def first_diff(a: list[int], b: list[int]) -> int:
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="qwen3-8b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--hf-new", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    import torch

    from fixedgraph import LLM, SamplingParams
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.testing.checkpoints import random_model
    from fixedgraph.weights.state_dict_source import StateDictSource

    hf = random_model(a.model, a.seed, device="cuda", dtype="bfloat16")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    prompt = np.random.default_rng(a.seed).integers(0, cfg.vocab_size, size=a.prompt).tolist()
    params = SamplingParams(temperature=0, max_tokens=a.new, ignore_eos=True)
    outs = {}
    for group in (1, 4):
        llm = LLM(weights=(StateDictSource(hf.state_dict(), a.model), cfg), backend="cuda",
                  max_model_len=a.prompt + a.new + 16, prefill_chunk=256, progress=False, decode_group=group)
        outs[f"group{group}"] = llm.generate([prompt], params)[0].token_ids
        outs[f"group{group}_again"] = llm.generate([prompt], params)[0].token_ids
        llm.close()
        del llm
    with torch.no_grad():
        ids = torch.tensor([prompt], device="cuda")
        g = hf.generate(ids, max_new_tokens=a.hf_new, min_new_tokens=a.hf_new, do_sample=False)
    outs["hf_eager"] = g[0, a.prompt:].tolist()
    names = list(outs)
    print(f"{a.model}, prompt {a.prompt}, seed {a.seed}: first differing token index per pair")
    for i, x in enumerate(names):
        for y in names[i + 1:]:
            print(f"  {x:14s} {y:14s} {first_diff(outs[x], outs[y])} of {min(len(outs[x]), len(outs[y]))}")
    print("  first tokens:", {k: v[:8] for k, v in outs.items()})
    return 0


if __name__ == "__main__":
    sys.exit(main())

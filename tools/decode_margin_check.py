"""Whose greedy tokens are right when fixedgraph and transformers bf16 part? Judge both against
transformers in float32 on the same (bf16-rounded) random weights.

For one random model (the bench's: same name, seed and prompt) this generates greedily with
fixedgraph (bf16, CUDA backend), with transformers eager in bf16 and with transformers in
float32, then runs the float32 model teacher-forced over each bf16 sequence. At every step it
asks: was the token picked the float32 argmax given that sequence's own prefix, and if not, how
far below it was it (the "deficit", in logits) compared with the float32 top-2 margin there. A
pick with a deficit of a few hundredths at a near-tie is rounding; a large one is a bug.

    python3 tools/decode_margin_check.py [--models qwen3-8b] [--prompt 128] [--new 128] [--json F]
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from group_agree_check import first_diff  # noqa: E402  (tools/ is on the path when run as a script)


def judge(hf32, prompt: list[int], toks: list[int], device: str) -> dict:
    """The float32 model teacher-forced over prompt + toks: per step, the pick's deficit."""
    import torch

    with torch.no_grad():
        ids = torch.tensor([prompt + toks], device=device)
        logits = hf32(input_ids=ids).logits[0, len(prompt) - 1:len(prompt) - 1 + len(toks)].double().cpu().numpy()
    top2 = np.sort(logits, axis=1)[:, -2:]
    picked = logits[np.arange(len(toks)), toks]
    deficit = logits.max(axis=1) - picked
    off = np.nonzero(deficit > 0)[0]
    return {
        "steps": len(toks),
        "fp32_argmax_agrees": int(len(toks) - len(off)),
        "first_off_step": int(off[0]) if len(off) else None,
        "max_deficit": float(deficit.max()) if len(toks) else 0.0,
        "off_steps": [{"step": int(i), "deficit": round(float(deficit[i]), 5),
                       "fp32_top2_margin": round(float(top2[i, 1] - top2[i, 0]), 5)} for i in off[:8]],
        "median_top2_margin": float(np.median(top2[:, 1] - top2[:, 0])),
        "logit_std": float(logits.std(axis=1).mean()),
    }


def check(name: str, prompt_len: int, new: int, seed: int, device: str = "cuda") -> dict:
    import torch

    from fixedgraph import LLM, SamplingParams
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.testing.checkpoints import cast_model, random_model
    from fixedgraph.weights.state_dict_source import StateDictSource

    hf32 = random_model(name, seed, device=device, dtype="float32")
    hf16 = cast_model(copy.deepcopy(hf32), torch.bfloat16)
    cfg = ModelConfig.from_hf_dict(hf32.config.to_dict())
    prompt = np.random.default_rng(seed).integers(0, cfg.vocab_size, size=prompt_len).tolist()  # bench.py's
    llm = LLM(weights=(StateDictSource(hf16.state_dict(), name), cfg), backend="cuda" if device == "cuda" else "reference",
              max_model_len=prompt_len + new + 16, prefill_chunk=256, progress=False)
    seqs = {"fixedgraph": llm.generate([prompt], SamplingParams(temperature=0, max_tokens=new, ignore_eos=True))[0].token_ids}
    llm.close()
    del llm
    with torch.no_grad():
        ids = torch.tensor([prompt], device=device)
        for label, m in (("hf_bf16", hf16), ("hf_fp32", hf32)):
            g = m.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False)
            seqs[label] = g[0, prompt_len:].tolist()
    del hf16
    out = {"model": name, "prompt": prompt_len, "new": new, "seed": seed,
           "first_diff": {f"{a}/{b}": first_diff(seqs[a], seqs[b])
                          for i, a in enumerate(seqs) for b in list(seqs)[i + 1:]},
           "judged_by_fp32": {k: judge(hf32, prompt, seqs[k], device) for k in ("fixedgraph", "hf_bf16")}}
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-8b")
    ap.add_argument("--prompt", type=int, default=128)
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda (the CUDA backend) or cpu (the reference backend)")
    ap.add_argument("--json", type=Path, help="also write the results here (a JSON list)")
    a = ap.parse_args()
    results = []
    for name in a.models.split(","):
        r = check(name, a.prompt, a.new, a.seed, a.device)
        results.append(r)
        print(json.dumps(r), flush=True)
        for k, j in r["judged_by_fp32"].items():
            print(f"{name} {k:10s}: {j['fp32_argmax_agrees']}/{j['steps']} picks are float32's argmax; "
                  f"max deficit {j['max_deficit']:.4f} (median top-2 margin {j['median_top2_margin']:.3f}, "
                  f"logit std {j['logit_std']:.3f})", flush=True)
        print(f"{name} first differing step: {r['first_diff']}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

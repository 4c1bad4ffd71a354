"""Do our prefill logits after a long prompt match transformers' on the bench's random model?

The long-prompt bench (tools/bench.py --prompt 4096) found 8B's greedy tokens differing from the
CUDA-graph peer's from the first one. This prints, for the bench's model, seed and prompt, our
logits after the prompt (the prefill graphs) against transformers' (bf16, same weights): cosine
similarity, largest difference, both argmaxes and transformers' top-2 margin, so a near-tie can
be told from a wrong prefill. --fp32: also transformers in float32 on the same (bf16-valued)
weights, the closest thing to exact here, with ours and transformers-bf16 each measured against
it: if ours is as close to it as transformers' own bf16 run, a differing argmax is bf16 rounding
on a near-tie, not a wrong prefill.

    python3 tools/long_agree_check.py [--models qwen3-8b] [--prompt 4096] [--device cuda] [--fp32]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from fixedgraph.engine import LLM  # noqa: E402
from fixedgraph.models.config import ModelConfig  # noqa: E402
from fixedgraph.testing.checkpoints import random_model  # noqa: E402
from fixedgraph.weights.state_dict_source import StateDictSource  # noqa: E402


def _last_logits(hf, prompt: list[int], device: str, chunk: int = 1024) -> np.ndarray:
    """transformers' logits after the prompt, fed in chunks through its KV cache (a whole 32k
    prompt at once materialises [heads, 32k, 32k] scores in the eager attention: 128 GiB for 8B
    in float32), keeping only the last position's logits."""
    from transformers import DynamicCache

    cache = DynamicCache()
    with torch.no_grad():
        for s in range(0, len(prompt), chunk):
            ids = torch.tensor([prompt[s:s + chunk]], device=device)
            out = hf(input_ids=ids, past_key_values=cache, use_cache=True, logits_to_keep=1)
    return out.logits[0, -1].float().cpu().numpy().astype(np.float64)


def _against(a: np.ndarray, ref: np.ndarray) -> dict:
    """a measured against ref: cosine, largest difference, and whether their argmaxes agree."""
    cos = float(a @ ref / (np.linalg.norm(a) * np.linalg.norm(ref)))
    return {"cosine": cos, "max_abs_diff": float(np.abs(a - ref).max()),
            "rms_diff": float(np.sqrt(np.mean((a - ref) ** 2))), "argmax": int(a.argmax()),
            "argmax_agrees": bool(a.argmax() == ref.argmax())}


def check(name: str, prompt_len: int, seed: int, device: str, fp32: bool = False) -> dict:
    backend = "cuda" if device == "cuda" else "reference"
    hf = random_model(name, seed, device=device, dtype="bfloat16" if device == "cuda" else "float32")
    cfg = ModelConfig.from_hf_dict(hf.config.to_dict())
    llm = LLM(weights=(StateDictSource(hf.state_dict(), name), cfg), backend=backend,
              max_model_len=prompt_len + 32, prefill_chunk=256, progress=False)
    prompt = np.random.default_rng(seed).integers(0, cfg.vocab_size, size=prompt_len).tolist()  # bench.py's
    ours = llm.runner.teacher_forced_logits(prompt + [prompt[-1]], prompt_len)[0].astype(np.float64)
    llm.close()
    ref = _last_logits(hf, prompt, device)
    top2 = np.argsort(ref)[-2:][::-1]
    vs = _against(ours, ref)
    res = {"model": name, "prompt": prompt_len, "cosine": vs["cosine"], "max_abs_diff": vs["max_abs_diff"],
           "ref_std": float(ref.std()), "ours_argmax": int(ours.argmax()), "ref_argmax": int(top2[0]),
           "ref_top2_margin": float(ref[top2[0]] - ref[top2[1]]),
           "ours_at_ref_top2": [float(ours[top2[0]]), float(ours[top2[1]])]}
    if fp32:
        del hf
        if device == "cuda":
            torch.cuda.empty_cache()
        exact = _last_logits(random_model(name, seed, device=device, dtype="float32"), prompt, device)
        e2 = np.argsort(exact)[-2:][::-1]
        res["fp32"] = {"argmax": int(e2[0]), "top2_margin": float(exact[e2[0]] - exact[e2[1]]),
                       "ours": _against(ours, exact), "transformers_bf16": _against(ref, exact)}
    return res


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-8b")
    ap.add_argument("--prompt", type=int, default=4096)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda", help="cuda (the CUDA backend) or cpu (the reference backend)")
    ap.add_argument("--fp32", action="store_true",
                    help="also transformers in float32, with ours and transformers-bf16 measured against it")
    args = ap.parse_args()
    for name in args.models.split(","):
        print(json.dumps(check(name, args.prompt, args.seed, args.device, args.fp32)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""fixedgraph against transformers: teacher-forced logits and greedy tokens."""
from __future__ import annotations

import numpy as np

from fixedgraph.testing.checkpoints import cast_model


def hf_logits(model, tokens: list[int]) -> np.ndarray:
    """float32 logits of a transformers model at every position: [len(tokens), vocab]."""
    import torch

    dev = next(model.parameters()).device
    with torch.no_grad():
        ids = torch.tensor([tokens], device=dev)
        return model(ids).logits[0].float().cpu().numpy()


def hf_greedy(model, prompt: list[int], n: int) -> list[int]:
    import torch

    dev = next(model.parameters()).device
    with torch.no_grad():
        out = model.generate(torch.tensor([prompt], device=dev), max_new_tokens=n, do_sample=False,
                             min_new_tokens=n, eos_token_id=None, pad_token_id=0)
    return out[0, len(prompt):].tolist()


def step_errors(ours: np.ndarray, ref: np.ndarray) -> np.ndarray:
    """Relative L2 error of each row: ||ours - ref|| / ||ref||."""
    return np.linalg.norm(ours - ref, axis=-1) / np.maximum(np.linalg.norm(ref, axis=-1), 1e-30)


def compare_teacher_forced(llm, model, tokens: list[int], prompt_len: int) -> dict:
    """Logits after the prompt and after each forced token, vs transformers in float32 on the
    whole sequence. Also measures transformers itself in bf16 against float32 on the same
    weights: the error any bf16 implementation of this model carries (the noise floor)."""
    import copy

    import torch

    ours = llm.runner.teacher_forced_logits(tokens, prompt_len)
    ref = hf_logits(model, tokens)[prompt_len - 1 :]
    hf_bf16 = hf_logits(cast_model(copy.deepcopy(model), torch.bfloat16), tokens)[prompt_len - 1 :]
    errs = step_errors(ours, ref)
    floor = step_errors(hf_bf16, ref)
    top2 = np.sort(ref, axis=-1)[:, -2:]
    differ = ours.argmax(-1) != ref.argmax(-1)
    return {"max_rel_err": float(errs.max()), "mean_rel_err": float(errs.mean()),
            "hf_bf16_max_rel_err": float(floor.max()), "hf_bf16_mean_rel_err": float(floor.mean()),
            "steps": len(errs), "argmax_agree": float(np.mean(~differ)),
            # float32 top-1 minus top-2 logit where our argmax differs, in units of that step's RMS
            # logit error: only near-ties (a few errors wide) may legitimately differ
            "disagree_margins": [float(x) for x in (top2[:, 1] - top2[:, 0])[differ]],
            "disagree_margin_in_errors": [float(x) for x in ((top2[:, 1] - top2[:, 0]) / np.maximum(
                np.sqrt(np.mean((ours - ref) ** 2, axis=-1)), 1e-30))[differ]]}

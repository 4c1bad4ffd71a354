"""SmolLM2-135M-Instruct (the default model, Q4_1 GGUF) against transformers loading the same file."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from fixedgraph.sampling import SamplingParams


def default_gguf() -> Path:
    from fixedgraph.models.default import cache_dir, default_model_path

    cached = list(Path(cache_dir()).glob("**/*.gguf")) if Path(cache_dir()).exists() else []
    if not cached and not os.environ.get("FIXEDGRAPH_SMOLLM2_WHEEL") and os.environ.get("FIXEDGRAPH_OFFLINE"):
        pytest.skip("the default model is not cached and FIXEDGRAPH_OFFLINE is set")
    try:
        return default_model_path()
    except Exception as exc:  # offline without the wheel
        pytest.skip(f"default model unavailable: {exc}")


def check_smollm2_greedy(backend: str, n_new: int, prompt: str = "Once upon a time") -> None:
    pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("gguf")
    import torch

    from fixedgraph.engine import LLM

    path = default_gguf()
    llm = LLM(path, backend=backend, max_model_len=256, progress=False)
    ids = llm.encode(prompt)
    ours = llm.generate([ids], SamplingParams(temperature=0, max_tokens=n_new, ignore_eos=True))[0]
    tok = transformers.AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)
    assert tok(prompt)["input_ids"] == ids, "tokenizers disagree on the prompt"
    model = transformers.AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    if backend == "cuda":
        model = model.cuda()
    with torch.no_grad():
        ref = model.generate(torch.tensor([ids], device=model.device), max_new_tokens=n_new, min_new_tokens=n_new,
                             do_sample=False, eos_token_id=None, pad_token_id=0)[0, len(ids):].tolist()
    text_ours, text_ref = llm.tokenizer.decode(ours.token_ids), tok.decode(ref, skip_special_tokens=True)
    print(f"ours: {text_ours!r}\nhf:   {text_ref!r}")
    assert ours.token_ids == ref, f"ours {text_ours!r} vs transformers {text_ref!r}"

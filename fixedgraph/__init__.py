"""fixedgraph: an LLM decode runtime whose device addresses are all fixed at boot.

    from fixedgraph import LLM, SamplingParams
    llm = LLM()                                   # the default model (SmolLM2-135M-Instruct)
    out = llm.generate(["Once upon a time"], SamplingParams(max_tokens=32))
    print(out[0].text)
"""
from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["LLM", "SamplingParams", "CompletionOutput", "get_device", "__version__"]


def __getattr__(name: str):
    # Lazy: `import fixedgraph` stays cheap and never touches CUDA or model code.
    if name == "LLM":
        from fixedgraph.engine import LLM

        return LLM
    if name == "SamplingParams":
        from fixedgraph.sampling import SamplingParams

        return SamplingParams
    if name == "CompletionOutput":
        from fixedgraph.outputs import CompletionOutput

        return CompletionOutput
    if name == "get_device":
        from fixedgraph.backends import get_device

        return get_device
    raise AttributeError(f"module 'fixedgraph' has no attribute {name!r}")

"""PyTorch peers for tools/bench.py, run in the same process on the same weights.

- ``hf_eager``: transformers ``generate`` (greedy, dynamic cache), decode ms/token from the
  difference of a 1-token and an n-token run (prefill cancels).
- ``torch_graph``: a static-KV decode loop (transformers ``StaticCache``), one token's forward
  captured in a CUDA graph and replayed; the next input token stays on the device.
- ``torch_compile``: the same loop with the forward compiled by TorchInductor
  (``torch.compile(mode="max-autotune-no-cudagraphs")`` would autotune for minutes; the default
  mode fuses the elementwise ops and picks library GEMMs) and then captured in a CUDA graph,
  which is what ``mode="reduce-overhead"`` does, with the capture under our control.
"""
from __future__ import annotations

import time

import torch


def _sync_time(fn) -> float:
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out


def hf_eager(model, prompt: list[int], n_new: int) -> dict:
    n_new = min(n_new, 64)  # ~80 ms/token: 64 tokens time it as well as 512, in an eighth of the time
    ids = torch.tensor([prompt], device="cuda")
    kw = dict(do_sample=False, eos_token_id=None, pad_token_id=0)
    with torch.no_grad():
        model.generate(ids, max_new_tokens=4, min_new_tokens=4, **kw)  # warm up
        t1, _ = _sync_time(lambda: model.generate(ids, max_new_tokens=1, min_new_tokens=1, **kw))
        tn, out = _sync_time(lambda: model.generate(ids, max_new_tokens=n_new, min_new_tokens=n_new, **kw))
    ms = (tn - t1) / (n_new - 1) * 1e3
    return {"ms_per_token": ms, "tok_per_s": 1e3 / ms, "tokens": out[0, len(prompt):].tolist()}


def torch_graph(model, prompt: list[int], n_new: int) -> dict:
    return _static_graph_loop(model, prompt, n_new, compiled=False)


def torch_compile(model, prompt: list[int], n_new: int) -> dict:
    return _static_graph_loop(model, prompt, n_new, compiled=True)


def _static_graph_loop(model, prompt: list[int], n_new: int, compiled: bool) -> dict:
    from transformers import StaticCache

    L = len(prompt)
    # NOTE: room past L + n_new: the cache may advance its own write position on every forward,
    # warm-ups included (an exact fit overflowed index_copy_ when a third warm-up was added).
    cache = StaticCache(config=model.config, max_cache_len=L + n_new + 16)
    dev = "cuda"
    with torch.no_grad():
        out = model(input_ids=torch.tensor([prompt], device=dev), past_key_values=cache,
                    cache_position=torch.arange(L, device=dev), use_cache=True)
        static_in = out.logits[:, -1].argmax(-1, keepdim=True)  # [1, 1]
        static_pos = torch.tensor([L], device=dev)

        def step():
            o = model(input_ids=static_in, past_key_values=cache, cache_position=static_pos, use_cache=True)
            return o.logits[:, -1].argmax(-1, keepdim=True)

        compile_s = 0.0
        if compiled:
            import torch._dynamo as dynamo  # (a bare `import torch._dynamo` would make torch local)

            dynamo.reset()
            step = torch.compile(step, fullgraph=True, dynamic=False)
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        t_c = time.perf_counter()
        with torch.cuda.stream(s):
            for _ in range(2):  # warm up / compile (writes positions L, L+1; overwritten below)
                step()
        torch.cuda.synchronize()
        compile_s = time.perf_counter() - t_c
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            static_out = step()
        tokens = torch.empty(n_new, dtype=torch.long, device=dev)
        tokens[0] = static_in[0, 0]
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        e0.record()
        for i in range(1, n_new):
            static_pos.fill_(L + i - 1)
            g.replay()
            tokens[i] = static_out[0, 0]
            static_in.copy_(static_out)
        e1.record()
        torch.cuda.synchronize()
        wall = time.perf_counter() - t0
    ms = e0.elapsed_time(e1) / (n_new - 1)
    return {"ms_per_token": ms, "tok_per_s": 1e3 / ms, "host_ms_per_token": wall * 1e3 / (n_new - 1),
            "warmup_s": compile_s, "tokens": tokens.tolist()}


def copy_bandwidth_GBps(nbytes: int = 4 << 30) -> float:
    """Device-to-device copy bandwidth counting bytes read + written (torch, median of 10)."""
    a = torch.randn(nbytes // 4, device="cuda")
    b = torch.empty_like(a)
    times = []
    for _ in range(12):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        b.copy_(a)
        e1.record()
        torch.cuda.synchronize()
        times.append(e0.elapsed_time(e1))
    times.sort()
    del a, b
    return 2 * nbytes / (times[len(times) // 2] * 1e-3) / 1e9


def main(argv: list[str]) -> int:
    """tools/peers.py ARGS.json OUT.json: one peer on tools/bench.py's random model, in its own
    process (ARGS: peer, model, seed, prompt, n_new); writes the peer's result as JSON."""
    import json
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from fixedgraph.testing.checkpoints import random_model

    a = json.loads(Path(argv[1]).read_text())
    hf = random_model(a["model"], a["seed"], device="cuda", dtype="bfloat16")
    r = globals()[a["peer"]](hf, a["prompt"], a["n_new"])
    Path(argv[2]).write_text(json.dumps(r))
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv))

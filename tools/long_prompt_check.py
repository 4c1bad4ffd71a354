"""Generate from random-weight models at long prompts, each case in its own process (a device
fault poisons the CUDA context), and report which cases run and, for those that fault, the op.

    python3 tools/long_prompt_check.py --models qwen3-0.6b,tiny-qwen3 --prompts 8192,32768 [--checked]

--checked sets FIXEDGRAPH_CHECKED=1 in the cases: every pass runs its program eagerly with a
synchronisation after each launch, so a fault names its op and arguments (slow). Prints one line
per case and exits 1 when any case failed.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(model: str, prompt_len: int, n_new: int, seed: int, lookahead: int | None = None) -> dict:
    import numpy as np

    from fixedgraph.sampling import SamplingParams
    from fixedgraph.testing.checkpoints import random_llm

    llm = random_llm(model, seed, "cuda", prompt_len + n_new + 16, lift_positions=True,
                     **({} if lookahead is None else {"lookahead": lookahead}))
    prompt = np.random.default_rng(seed).integers(0, llm.config.vocab_size, size=prompt_len).tolist()
    t = time.perf_counter()
    out = llm.generate([prompt], SamplingParams(temperature=0, max_tokens=n_new, ignore_eos=True))[0]
    return {"ok": True, "tokens": out.token_ids, "s": round(time.perf_counter() - t, 2),
            "buckets": list(llm.model.ctx_buckets)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-0.6b")
    ap.add_argument("--prompts", default="8192,32768")
    ap.add_argument("--new", type=int, default=8)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--checked", action="store_true")
    ap.add_argument("--lookahead", type=int, help="decode steps queued ahead (default: the engine's)")
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--json")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "PROMPT"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.one:
        print(json.dumps(one(a.one[0], int(a.one[1]), a.new, a.seed, a.lookahead)))
        return 0
    env = dict(os.environ, FIXEDGRAPH_CHECKED="1" if a.checked else "0")
    results, failed = [], False
    for model in a.models.split(","):
        for p in (int(x) for x in a.prompts.split(",")):
            cmd = [sys.executable, __file__, "--one", model, str(p), "--new", str(a.new), "--seed", str(a.seed),
                   *(["--lookahead", str(a.lookahead)] if a.lookahead else [])]
            try:
                r = subprocess.run(cmd, capture_output=True, text=True, timeout=a.timeout, env=env)
                res = json.loads(r.stdout.strip().splitlines()[-1]) if r.returncode == 0 else {
                    "ok": False, "error": (r.stderr.strip().splitlines() or ["(no output)"])[-1]}
            except subprocess.TimeoutExpired:
                res = {"ok": False, "error": f"timed out after {a.timeout:.0f} s"}
            res.update(model=model, prompt=p, checked=a.checked)
            failed |= not res["ok"]
            results.append(res)
            print(f"{model:14s} prompt {p:6d} {'ok   ' + str(res.get('tokens')) if res['ok'] else 'FAIL ' + res['error']}",
                  flush=True)
    if a.json:
        Path(a.json).write_text(json.dumps(results, indent=1))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

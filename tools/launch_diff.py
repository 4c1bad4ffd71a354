#!/usr/bin/env python3
"""Every decode launch of a model's graphs, as launch configurations, and what differs in
another tree: the check that a change leaves some model's launches exactly as they were
(entry, grid, block, dynamic shared memory and every scalar argument), made without a GPU
and without weights (the programs are built from the model's shapes only).

    python3 tools/launch_diff.py [--models qwen3-0.6b,qwen3-8b] [--max-model-len 4096]
    python3 tools/launch_diff.py --against .ab/base [--against-env FIXEDGRAPH_GEMV_NARROW=0 ...]

Models are the named shapes of fixedgraph.testing.checkpoints (transformers builds their
config; no weights). One line per distinct launch of a decode step of width 1, greedy, per
context bucket, with its count (layers merge: labels lose their layer number). --against DIR
runs this tool in DIR (another tree, e.g. one exported by tools/ab_prepare.sh) with
--against-env added to its environment, and prints the lines only one side has; exit status 1
when the sides differ.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def launch_lines(model: str, max_model_len: int) -> list[str]:
    """'count x bucket label entry grid block shared args' for each distinct decode launch."""
    sys.path.insert(0, str(ROOT))
    from fixedgraph.models.config import ModelConfig
    from fixedgraph.models.dense import DenseDecoder, Sizes
    from fixedgraph.testing.checkpoints import hf_config

    cfg = ModelConfig.from_hf_dict(hf_config(model).to_dict())
    max_len = min(cfg.max_position_embeddings, max_model_len)
    sizes = Sizes(widths=(1,), chunk_buckets=(128,), block_size=16, num_blocks=-(-max_len // 16) + 1,
                  max_model_len=max_len, ring_len=16)
    dec = DenseDecoder(cfg, sizes)
    counts: collections.Counter[str] = collections.Counter()
    for ctx in dec.ctx_buckets:
        for op in dec.decode_program(1, False, ctx).launches:
            layerless = [re.sub(r"L\d+\.", "L#.", repr(a)) for a in op.args]  # pointers: which region
            label = re.sub(r"L\d+\.", "L#.", op.label)
            carveout = "" if op.carveout is None else f" carveout={op.carveout}"
            counts[f"ctx {ctx} {label} {op.entry} grid={op.grid} block={op.block} shared={op.shared}{carveout} "
                   f"args=({', '.join(layerless)})"] += 1
    return [f"{n} x {line}" for line, n in sorted(counts.items())]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-0.6b,qwen3-8b")
    ap.add_argument("--max-model-len", type=int, default=4096)
    ap.add_argument("--against", help="another tree: print what differs from its launches")
    ap.add_argument("--against-env", action="append", default=[], metavar="VAR=VAL",
                    help="environment for the --against side (repeatable)")
    ap.add_argument("--json", action="store_true", help="print {model: lines} as JSON (what --against reads)")
    args = ap.parse_args()
    models = [m for m in args.models.split(",") if m]
    mine = {m: launch_lines(m, args.max_model_len) for m in models}
    if args.json:
        print(json.dumps(mine))
        return 0
    if not args.against:
        for m, lines in mine.items():
            print(f"{m}:")
            print("\n".join("  " + l for l in lines))
        return 0
    other_dir = Path(args.against).resolve()
    env = dict(os.environ, PYTHONPATH=str(other_dir))
    for kv in args.against_env:
        if "=" not in kv:
            ap.error(f"--against-env wants VAR=VAL, got {kv!r}")
        k, v = kv.split("=", 1)
        env[k] = v
    out = subprocess.run([sys.executable, str(other_dir / "tools/launch_diff.py"), "--json", "--models", args.models,
                          "--max-model-len", str(args.max_model_len)], capture_output=True, text=True, env=env,
                         cwd=other_dir)
    if out.returncode != 0:
        print(out.stdout + out.stderr, file=sys.stderr)
        print(f"launch_diff: the tree at {other_dir} failed to list its launches", file=sys.stderr)
        return 2
    theirs = json.loads(out.stdout)
    differ = False
    for m in models:
        a, b = set(mine[m]), set(theirs.get(m, []))
        if a == b:
            print(f"{m}: the same {len(a)} distinct launches")
            continue
        differ = True
        print(f"{m}: {len(b - a)} launch lines only in {args.against}, {len(a - b)} only here")
        for l in sorted(b - a):
            print(f"  - {l}")
        for l in sorted(a - b):
            print(f"  + {l}")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

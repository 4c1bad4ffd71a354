#!/usr/bin/env python3
"""Write random-weight Hugging Face checkpoints of known shapes (needs torch + transformers).

    python tools/make_checkpoint.py tiny-qwen3 /tmp/tiny-qwen3 [--seed 0]
"""
import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixedgraph.testing.checkpoints import CONFIGS, save_checkpoint  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("name", choices=sorted(CONFIGS))
    ap.add_argument("out_dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(save_checkpoint(args.name, args.out_dir, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Every FIXEDGRAPH_* environment variable (fixedgraph.knobs), as a table.

    python tools/list_knobs.py              # the table
    python tools/list_knobs.py --markdown   # docs/KNOBS.md's table (a host test keeps it current)
    python tools/list_knobs.py --check-env  # exit 1 naming any FIXEDGRAPH_* variable set here that nothing reads
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixedgraph import knobs  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    ap.add_argument("--check-env", action="store_true")
    args = ap.parse_args(argv)
    if args.check_env:
        stray = knobs.unknown()
        if stray:
            print(knobs.describe_unknown(stray))
            return 1
        print(f"ok: {len(knobs.set_knobs())} known FIXEDGRAPH_* variables set, none unknown")
        return 0
    if args.markdown:
        print(knobs.markdown())
        return 0
    width = max(len(k.name) for k in knobs.KNOBS)
    for k in knobs.KNOBS:
        print(f"{k.name:<{width}}  {k.scope:<7}  default {k.default}: {k.meaning}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

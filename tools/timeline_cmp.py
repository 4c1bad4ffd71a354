#!/usr/bin/env python3
"""Timelines of one decode step side by side: the A/B view of tools/timeline.py's JSON files.

    python3 tools/timeline_cmp.py main=timeline/timeline_qwen3-0.6b.json x=timeline_ab_x/timeline_qwen3-0.6b.json

Per role in a layer (o_proj apart from down_proj, layer 0's norm + qkv apart from the others'
when another entry does it), each side's step / release / run after the wait / early residency
and the median CTA's phase marks, with each column's change from the first side
(fixedgraph.timeline.compare). `tools/gpu_check.sh timeline` with TIMELINE_AB=1 prints it for
this tree against every .ab side. No GPU needed.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sides", nargs="+", metavar="[NAME=]PATH", help="timeline JSON files; the first is the reference")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    from fixedgraph import timeline

    sides = {}
    for spec in a.sides:
        name, sep, path = spec.partition("=")
        if not sep or "/" in name:  # a bare path (which may itself hold "=")
            name, path = "", spec
        name = name or Path(path).parent.name or path
        if name in sides:
            print(f"timeline_cmp: two sides named {name!r}: give NAME=PATH", file=sys.stderr)
            return 2
        try:
            data = json.loads(Path(path).read_text())
        except (OSError, ValueError) as e:
            print(f"timeline_cmp: cannot read {path}: {e}", file=sys.stderr)
            return 2
        if not isinstance(data, dict) or "launches" not in data:
            print(f"timeline_cmp: {path} is not a tools/timeline.py JSON (no 'launches')", file=sys.stderr)
            return 2
        sides[name] = data
    print(timeline.compare(sides))
    return 0


if __name__ == "__main__":
    sys.exit(main())

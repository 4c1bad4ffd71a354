"""How a saved timeline's CTAs sat on the SMs (no GPU): per entry, the SMs a launch used, its CTAs
on SMs holding 1 / 2 / 3+ CTAs of the same launch, and how often a later launch's CTAs shared
their SM at the same time (fixedgraph.timeline.sm_placement).

    python3 tools/timeline_sm.py OUT/timeline/timeline_trace_qwen3-0.6b.json [--ahead 3] [--json]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from fixedgraph import timeline  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("trace", nargs="+", help="timeline_trace_MODEL.json files (tools/timeline.py --out)")
    ap.add_argument("--ahead", type=int, default=3, help="later launches to test for SM sharing")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    for path in a.trace:
        try:
            rows = timeline.sm_placement_from_trace(json.loads(Path(path).read_text()), a.ahead)
        except (OSError, ValueError, KeyError) as exc:
            print(f"{path}: not a timeline trace ({exc}); give a timeline_trace_*.json that tools/timeline.py wrote",
                  file=sys.stderr)
            return 2
        if a.json:
            print(json.dumps({"trace": path, "placement": rows}))
        else:
            print(f"{path}:\n{timeline.placement_table(rows)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

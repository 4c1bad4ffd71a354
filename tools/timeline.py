"""Per-CTA timeline of one decode-graph replay (GPU): when each launch's CTAs became resident,
passed their PDL wait and exited, per SM. Needs nvcc on the GPU machine: the kernels are rebuilt
with tracing (tools/build_ptx.py --trace) into a scratch folder the engine then loads.

    python3 tools/timeline.py [--models qwen3-0.6b,qwen3-8b] [--context 128[,4096,...]] [--out DIR] [--light]

Prints a table per model (means per entry) and writes timeline_MODEL.json (per launch) and
timeline_trace_MODEL.json (Perfetto: one track per SM) into --out. The traced kernels sync once
at entry and stamp %globaltimer three times per CTA: compare launches within a run, not against
the untraced graph's times. --light builds the light records instead (ptx/src/pdl.cuh: thread 0
stamps alone, no barrier at entry, so the CTAs keep their untraced order of work): end times
are thread 0's exits and the `spread` column is empty.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="qwen3-0.6b")
    ap.add_argument("--context", default="128", help="keys in the decode step; a comma list runs each")
    ap.add_argument("--out", default="timeline_out")
    ap.add_argument("--ptx-dir", default="/tmp/fixedgraph_ptx_trace", help="where the traced PTX is built")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--light", action="store_true", help="light records (thread 0 only, no barrier at entry)")
    a = ap.parse_args()
    if not os.environ.get("FIXEDGRAPH_PTX_DIR"):  # before fixedgraph looks up any module
        subprocess.run([sys.executable, str(ROOT / "tools" / "build_ptx.py"), "--trace", a.ptx_dir]
                       + (["--light"] if a.light else []), check=True, stdout=subprocess.DEVNULL)
        os.environ["FIXEDGRAPH_PTX_DIR"] = a.ptx_dir
    sys.path.insert(0, str(ROOT))
    from fixedgraph import timeline
    from fixedgraph.testing.checkpoints import random_llm

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name in a.models.split(","):
        contexts = [int(c) for c in a.context.split(",")]
        llm = random_llm(name, a.seed, "cuda", max(contexts) + 64)
        for ctx in contexts:
            records, launches = timeline.capture(llm, ctx)
            times = timeline.launch_times(records, launches)
            kind = "light-traced" if a.light else "traced"
            print(f"\n{name}, decode at context {ctx}, {kind} kernels ({len(records)} CTA records):")
            print(timeline.table(times, roles=True))
            placement = timeline.sm_placement(records, launches)
            print(timeline.placement_table(placement))
            tag = name if len(contexts) == 1 else f"{name}_{ctx}"
            (out / f"timeline_{tag}.json").write_text(json.dumps(
                {"model": name, "context": ctx, "launches": timeline.to_json(times),
                 "by_entry": timeline.by_entry(times), "by_role": timeline.by_role(times),
                 "placement": placement}, indent=1))
            (out / f"timeline_trace_{tag}.json").write_text(timeline.chrome_trace(records, launches))
        del llm
    return 0


if __name__ == "__main__":
    sys.exit(main())

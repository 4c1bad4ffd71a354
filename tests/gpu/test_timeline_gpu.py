"""tools/timeline.py on the H200: traced kernels record one CTA each, and every launch is accounted for."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_timeline_of_a_decode_replay(cuda, tmp_path):
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found: the timeline rebuilds the kernels with tracing")
    pytest.importorskip("transformers")
    # The tool builds its own traced modules into --ptx-dir only when FIXEDGRAPH_PTX_DIR is unset
    # (set, it names traced modules the caller built): a run of tests/gpu under an A/B build's
    # FIXEDGRAPH_PTX_DIR (untraced) must not hand that directory to it (session 48's one failure).
    env = {k: v for k, v in os.environ.items() if k != "FIXEDGRAPH_PTX_DIR"}
    r = subprocess.run([sys.executable, str(ROOT / "tools/timeline.py"), "--models", "tiny-qwen3", "--context", "64",
                        "--out", str(tmp_path), "--ptx-dir", str(tmp_path / "ptx")],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    data = json.loads((tmp_path / "timeline_tiny-qwen3.json").read_text())
    launches = data["launches"]
    assert len(launches) > 10 and all(t["end_last"] >= t["start_first"] for t in launches)
    # a launch's CTAs exit after its predecessor's last CTA did: completion is transitive
    assert all(t["step_us"] >= 0 for t in launches[1:]), [t["step_us"] for t in launches]
    trace = json.loads((tmp_path / "timeline_trace_tiny-qwen3.json").read_text())
    assert sum(1 for e in trace["traceEvents"] if e["ph"] == "X") == sum(t["ctas"] for t in launches)

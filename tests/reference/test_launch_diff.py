"""tools/launch_diff.py: a model's decode launches built from its shapes alone, and the lines
another tree (here this one, with a knob changed) does not share."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOL = [sys.executable, str(ROOT / "tools/launch_diff.py"), "--models", "tiny-qwen3", "--max-model-len", "600"]


def test_lists_each_decode_launch_per_context_bucket():
    out = subprocess.run(TOOL, capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "tiny-qwen3:"
    for ctx in (128, 512, 600):  # the buckets under max_model_len, and max_model_len
        assert any(f" ctx {ctx} L#.norm+qkv_proj gemv_rmsnorm" in l for l in lines), ctx
    assert any(l.strip().startswith("2 x ctx 600 L#.o_proj gemv_") for l in lines)  # both layers merge


def test_against_a_tree_names_what_differs():
    same = subprocess.run(TOOL + ["--against", str(ROOT)], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert same.returncode == 0 and "tiny-qwen3: the same" in same.stdout, same.stdout + same.stderr
    knob = subprocess.run(TOOL + ["--against", str(ROOT), "--against-env", "FIXEDGRAPH_GEMV_FUSED_SPLIT=1"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert knob.returncode == 1, knob.stdout + knob.stderr
    only_there = [l for l in knob.stdout.splitlines() if l.startswith("  - ")]
    assert only_there and all("gemv_rmsnorm" in l or "argmax" in l for l in only_there)

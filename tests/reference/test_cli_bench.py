"""fixedgraph bench on the reference backend: its figures, host time per step included."""
import json
import subprocess
import sys

import pytest


def test_bench_reports_speed_and_host_time(tmp_path):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.testing.checkpoints import save_checkpoint

    path = save_checkpoint("tiny-qwen3", tmp_path / "ckpt", seed=1)
    base = [sys.executable, "-m", "fixedgraph.cli", "bench", "--model", str(path), "--backend", "reference",
            "--prompt-tokens", "12", "--max-tokens", "9"]
    out = subprocess.run(base + ["--json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    res = json.loads(out.stdout)
    assert res["backend"] == "reference" and res["new_tokens"] == 9 and res["ms_per_token"] > 0
    assert 0 < res["launch_us_median"] <= res["host_us_per_step_median"] <= res["host_us_per_step_p90"]
    text = subprocess.run(base, capture_output=True, text=True, timeout=300)
    assert text.returncode == 0 and "ms/token" in text.stdout and "us/step median" in text.stdout, text.stderr

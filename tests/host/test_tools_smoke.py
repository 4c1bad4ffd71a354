"""The GPU benchmark tools keep working: their programs build and run on the reference backend."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_bench_kernels_programs_run():
    out = subprocess.run([sys.executable, str(ROOT / "tools/bench_kernels.py"), "--smoke"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "smoke ok: 6 programs" in out.stdout, out.stdout + out.stderr


def test_host_step_probe_times_every_step():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = subprocess.run([sys.executable, str(ROOT / "tools/host_step_probe.py"), "--steps", "40"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    import json

    stats = json.loads(out.stdout.splitlines()[0])
    assert stats["steps"] == 39 and 0 < stats["median_us"] <= stats["max_us"]  # token 1 is the prefill's


def test_kernel_list_is_current():
    """docs/KERNELS.md is what tools/list_kernels.py prints (regenerate it after kernel changes)."""
    out = subprocess.run([sys.executable, str(ROOT / "tools/list_kernels.py"), "--markdown"], capture_output=True,
                         text=True, timeout=120)
    listed = [l for l in (ROOT / "docs/KERNELS.md").read_text().splitlines() if l.startswith("- `")]
    assert out.returncode == 0 and listed == out.stdout.splitlines()


def test_ab_prepare_exports_each_ref(tmp_path):
    """tools/ab_prepare.sh exports committed trees for gpu_check's ab stage (needs a git checkout)."""
    if not (ROOT / ".git").exists() or shutil.which("git") is None:
        pytest.skip("not a git checkout")
    env = dict(os.environ, AB_DIR=str(tmp_path / "ab"))
    out = subprocess.run(["bash", str(ROOT / "tools/ab_prepare.sh"), "base=HEAD"], capture_output=True, text=True,
                         timeout=120, env=env, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert (tmp_path / "ab/base/tools/gpu_check.sh").exists() and (tmp_path / "ab/base/ptx/gemv.ptx").exists()
    bad = subprocess.run(["bash", str(ROOT / "tools/ab_prepare.sh"), "x=no-such-ref"], capture_output=True, text=True,
                         timeout=60, env=env, cwd=ROOT)
    assert bad.returncode == 2 and "not a commit" in bad.stderr

"""The GPU benchmark tools keep working: their programs build and run on the reference backend."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_kernels_programs_run():
    out = subprocess.run([sys.executable, str(ROOT / "tools/bench_kernels.py"), "--smoke"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "smoke ok: 6 programs" in out.stdout, out.stdout + out.stderr


def test_kernel_list_is_current():
    """docs/KERNELS.md is what tools/list_kernels.py prints (regenerate it after kernel changes)."""
    out = subprocess.run([sys.executable, str(ROOT / "tools/list_kernels.py"), "--markdown"], capture_output=True,
                         text=True, timeout=120)
    listed = [l for l in (ROOT / "docs/KERNELS.md").read_text().splitlines() if l.startswith("- `")]
    assert out.returncode == 0 and listed == out.stdout.splitlines()

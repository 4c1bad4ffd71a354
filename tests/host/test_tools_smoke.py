"""The GPU benchmark tools keep working: their programs build and run on the reference backend."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_bench_kernels_programs_run():
    out = subprocess.run([sys.executable, str(ROOT / "tools/bench_kernels.py"), "--smoke"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0 and "smoke ok: 4 programs" in out.stdout, out.stdout + out.stderr

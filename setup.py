"""Build the Cython driver runtime (runtime_pyx/) and ship the committed PTX as package data.

The extensions cimport ``cuda.bindings.cydriver``, whose .pxd declares the driver API ``from
"cuda.h"``, so the build needs a cuda.h of a version that matches the pinned cuda-bindings. No
CUDA toolkit is required: the header comes from the pinned ``nvidia-cuda-runtime`` wheel (via
cuda.pathfinder). ``FIXEDGRAPH_CUDA_INCLUDE`` overrides; a local toolkit is the last resort.
"""
import os
import shutil
from pathlib import Path

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def cuda_include_dir() -> str:
    candidates = []
    if os.environ.get("FIXEDGRAPH_CUDA_INCLUDE"):
        candidates.append(os.environ["FIXEDGRAPH_CUDA_INCLUDE"])
    try:
        from cuda.pathfinder import find_nvidia_header_directory

        found = find_nvidia_header_directory("cudart")
        if found:
            candidates.append(found)
    except Exception:
        pass
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home:
            candidates.append(os.path.join(home, "include"))
    # cydriver.pxd includes cuda.h and cudaProfiler.h: a directory must hold both.
    for inc in candidates:
        if all(os.path.exists(os.path.join(inc, h)) for h in ("cuda.h", "cudaProfiler.h")):
            return inc
    raise SystemExit(
        "fixedgraph build: no cuda.h found. Install the pinned headers with "
        "`pip install nvidia-cuda-runtime==13.3.29 nvidia-cuda-profiler-api==13.3.27 cuda-pathfinder` (a normal `pip install .` does this), "
        "or set FIXEDGRAPH_CUDA_INCLUDE to a directory holding cuda.h"
    )


def extensions():
    from Cython.Build import cythonize

    inc = cuda_include_dir()
    exts = [
        Extension(
            f"fixedgraph._{name}",
            [f"runtime_pyx/{name}.pyx"],
            include_dirs=[inc],
            language="c++",
            extra_compile_args=["-O2", "-std=c++17", "-Wno-deprecated-declarations"],
        )
        for name in ("driver", "graph", "stepper")
    ]
    return cythonize(exts, compiler_directives={"language_level": "3"}, nthreads=os.cpu_count() or 1)


class build_py_with_ptx(build_py):
    """Copy the committed ptx/*.ptx into the package (fixedgraph/ptx/) of the build."""

    def run(self):
        super().run()
        dst = Path(self.build_lib) / "fixedgraph" / "ptx"
        dst.mkdir(parents=True, exist_ok=True)
        for ptx in sorted((ROOT / "ptx").glob("*.ptx")):
            shutil.copy2(ptx, dst / ptx.name)


setup(ext_modules=extensions(), cmdclass={"build_py": build_py_with_ptx})

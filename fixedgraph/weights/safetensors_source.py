"""Hugging Face safetensors checkpoints (single file or sharded), read lazily one tensor at a time."""
from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import numpy as np
from safetensors import safe_open

from fixedgraph import bf16
from fixedgraph.errors import FixedGraphError, UnsupportedModel, WeightFileError
from fixedgraph.weights.source import WeightSource

SINGLE_FILE = "model.safetensors"
INDEX_FILE = "model.safetensors.index.json"
_FLOAT_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": np.uint16}


class SafetensorsSource(WeightSource):
    """An HF model directory: `model.safetensors`, or shards listed in `model.safetensors.index.json`."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._handles: dict[Path, Any] = {}  # shard -> safe_open handle, opened on first use
        self._where: dict[str, Path] = {}  # tensor name -> shard
        self._headers: dict[Path, tuple[int, dict[str, Any]]] = {}  # shard -> (data start, header)
        for shard in self._shards():
            start, header = _read_header(shard)
            self._headers[shard] = (start, header)
            for name in header:
                if name != "__metadata__":
                    self._where[name] = shard

    def names(self) -> list[str]:
        return list(self._where)

    def has(self, name: str) -> bool:
        return name in self._where

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(int(d) for d in self._info(name)["shape"])

    def load(self, name: str) -> np.ndarray:
        info = self._info(name)
        shard = self._where[name]
        dtype = info["dtype"]
        shape = tuple(info["shape"])
        if dtype not in _FLOAT_DTYPES:
            raise UnsupportedModel(
                f"tensor {name!r} in {shard} has dtype {dtype}; only F32, F16 and BF16 are supported")
        if dtype == "BF16":
            # numpy has no bf16, so safetensors' numpy framework cannot return it; the raw bytes
            # are already the bf16 bits we want. Read exactly this tensor's byte range.
            start, _ = self._headers[shard]
            begin, end = info["data_offsets"]
            with open(shard, "rb") as f:
                f.seek(start + begin)
                raw = f.read(end - begin)
            if len(raw) != end - begin:
                raise WeightFileError(f"{shard} is truncated inside tensor {name!r}; re-download it")
            return np.frombuffer(raw, dtype="<u2").astype(np.uint16).reshape(shape)  # bf16 bits
        try:
            arr = self._handle(shard).get_tensor(name)  # [*shape] f32 or f16
        except Exception as e:
            raise WeightFileError(f"cannot read tensor {name!r} from {shard}: {e}; re-download it") from e
        return bf16.from_f32(arr.astype(np.float32, copy=False)).reshape(shape)

    def close(self) -> None:
        self._handles.clear()
        self._where.clear()

    def _info(self, name: str) -> dict[str, Any]:
        if not self._headers:
            raise FixedGraphError(f"{self.path} is closed")
        shard = self._where.get(name)
        if shard is None:
            raise self._missing(name)
        return self._headers[shard][1][name]

    def _handle(self, shard: Path) -> Any:
        if shard not in self._handles:
            try:
                self._handles[shard] = safe_open(str(shard), framework="numpy")
            except Exception as e:
                raise WeightFileError(f"{shard} is not a valid safetensors file ({e}); re-download it") from e
        return self._handles[shard]

    def _shards(self) -> list[Path]:
        index = self.path / INDEX_FILE
        if index.is_file():
            try:
                weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
            except (json.JSONDecodeError, KeyError, UnicodeDecodeError) as e:
                raise WeightFileError(f"{index} is malformed ({e!r}); re-download it") from e
            shards = [self.path / f for f in dict.fromkeys(weight_map.values())]
            missing = [str(s) for s in shards if not s.is_file()]
            if missing:
                raise WeightFileError(f"{index} lists shards that do not exist: {', '.join(missing)}")
            return shards
        single = self.path / SINGLE_FILE
        if single.is_file():
            return [single]
        raise WeightFileError(
            f"{self.path} has neither {SINGLE_FILE} nor {INDEX_FILE}; download the model's "
            f"safetensors weights into it")


def _read_header(shard: Path) -> tuple[int, dict[str, Any]]:
    """Parse and check a safetensors header: (offset where tensor data starts, header dict)."""
    size = shard.stat().st_size
    try:
        with open(shard, "rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > size - 8:
                raise ValueError(f"header length {header_len} exceeds the file size {size}")
            header = json.loads(f.read(header_len))
        if not isinstance(header, dict):
            raise ValueError("header is not a JSON object")
        start = 8 + header_len
        for name, info in header.items():
            if name == "__metadata__":
                continue
            begin, end = info["data_offsets"]
            if start + end > size:
                raise ValueError(f"tensor {name!r} ends at byte {start + end}, past the end ({size})")
    except (struct.error, ValueError, KeyError, TypeError, UnicodeDecodeError) as e:
        raise WeightFileError(
            f"{shard} is not a valid safetensors file ({e}); it may be truncated or corrupt: "
            f"re-download it") from e
    return start, header

"""Exceptions fixedgraph raises on purpose; every message names what was wrong and what to do."""
from __future__ import annotations


class FixedGraphError(Exception):
    """Base class of every error fixedgraph raises on purpose."""


class UnsupportedModel(FixedGraphError):
    """The model's architecture or one of its features is not one fixedgraph runs."""


class WeightFileError(FixedGraphError):
    """A weight file is missing, malformed, or does not match the model's config."""


class InvalidSamplingParams(FixedGraphError, ValueError):
    """A `SamplingParams` field is out of range; the message names the field, value and range."""


class KVPoolExhausted(FixedGraphError):
    """The paged KV pool has too few free blocks for an allocation; nothing was allocated."""


class EngineBusy(FixedGraphError):
    """A generation was started while another still ran on the same engine (one at a time)."""


class ContextOverflow(FixedGraphError):
    """A sequence would grow past the context (max_blocks_per_seq * block_size tokens)."""


class NoDevice(FixedGraphError):
    """No NVIDIA driver or no GPU: the CUDA backend cannot start."""


class CudaError(FixedGraphError):
    """A CUDA driver call failed. ``op_index`` names the program op when known."""

    def __init__(self, call: str, code: int, name: str, text: str = "", *, detail: str = "",
                 op_index: int | None = None) -> None:
        self.call, self.code, self.name, self.text = call, code, name, text
        self.detail, self.op_index = detail, op_index
        msg = f"{call} failed: {name} ({code})" + (f": {text}" if text else "")
        if op_index is not None:
            msg += f" at op {op_index}"
        if detail:
            msg += f"\n{detail}"
        super().__init__(msg)


class PtxError(FixedGraphError):
    """A PTX module is malformed or lacks an entry the program asks for."""


class LaunchConfigError(FixedGraphError, ValueError):
    """A launch's geometry (grid, block, cluster, shared memory) is invalid or cannot run here."""


class ArgumentError(FixedGraphError, TypeError):
    """A kernel argument does not fit its PTX parameter (count, type or range)."""

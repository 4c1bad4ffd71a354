"""Per-request sampling parameters and the row a sampling kernel reads for them.

Field names and meanings follow vLLM's `SamplingParams` so users can carry settings across.
Everything is validated once, at construction; the engine then only reads the fields.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from fixedgraph.errors import InvalidSamplingParams

# Temperatures below this are treated as greedy: dividing logits by a tiny temperature in f32
# overflows to inf long before it reaches 0, and the result is argmax anyway.
GREEDY_TEMPERATURE_EPS = 1e-5

# struct format and names of `SamplingParams.device_row`, in order: 4 x f32, i32, 3 x u32.
DEVICE_ROW_FORMAT = "<ffffiIII"
DEVICE_ROW_FIELDS = (
    "temperature", "top_p", "min_p", "repetition_penalty", "top_k", "seed_lo", "seed_hi", "step",
)

_U32 = 1 << 32
_U64 = 1 << 64
_I32_MAX = (1 << 31) - 1


def _bad(name: str, valid: str, value: Any) -> InvalidSamplingParams:
    return InvalidSamplingParams(f"{name} must be {valid}, got {value!r}")


def _is_int(value: Any) -> bool:
    # bool is an int subclass; `top_k=True` is a mistake, not 1.
    return isinstance(value, int) and not isinstance(value, bool)


def _as_float(name: str, value: Any, valid: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(name, valid, value)
    try:
        f = float(value)
    except OverflowError:  # an int too large for a double
        raise _bad(name, valid, value) from None
    if math.isnan(f):
        raise _bad(name, valid, value)
    return f


@dataclass(slots=True)
class SamplingParams:
    """How to pick each next token of one request, and when to stop.

    `top_k` 0 or -1 disables it (stored as 0). `max_tokens` None generates until the context
    ends. `stop` is stored as a list of strings and `stop_token_ids` as a list of ints (both
    empty when not given). `seed` None means the engine draws one per request (`resolve_seed`).
    """

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    repetition_penalty: float = 1.0
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    max_tokens: int | None = 16
    min_tokens: int = 0
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    seed: int | None = None
    include_stop_str_in_output: bool = False
    skip_special_tokens: bool = True

    def __post_init__(self) -> None:
        t = _as_float("temperature", self.temperature, "a finite number >= 0")
        if not (0.0 <= t < math.inf):
            raise _bad("temperature", "a finite number >= 0", self.temperature)
        self.temperature = t

        p = _as_float("top_p", self.top_p, "in (0, 1]")
        if not (0.0 < p <= 1.0):
            raise _bad("top_p", "in (0, 1]", self.top_p)
        self.top_p = p

        if not _is_int(self.top_k) or not (self.top_k in (0, -1) or 1 <= self.top_k <= _I32_MAX):
            raise _bad("top_k", "0 or -1 (disabled) or an integer in [1, 2**31)", self.top_k)
        self.top_k = max(self.top_k, 0)

        m = _as_float("min_p", self.min_p, "in [0, 1]")
        if not (0.0 <= m <= 1.0):
            raise _bad("min_p", "in [0, 1]", self.min_p)
        self.min_p = m

        r = _as_float("repetition_penalty", self.repetition_penalty, "a finite number > 0")
        if not (0.0 < r < math.inf):
            raise _bad("repetition_penalty", "a finite number > 0", self.repetition_penalty)
        self.repetition_penalty = r

        for name in ("presence_penalty", "frequency_penalty"):
            value = getattr(self, name)
            v = _as_float(name, value, "in [-2, 2]")
            if not (-2.0 <= v <= 2.0):
                raise _bad(name, "in [-2, 2]", value)
            setattr(self, name, v)

        if self.max_tokens is not None and not (_is_int(self.max_tokens) and self.max_tokens >= 1):
            raise _bad("max_tokens", "None (until the context ends) or an integer >= 1",
                       self.max_tokens)
        if not _is_int(self.min_tokens) or self.min_tokens < 0:
            raise _bad("min_tokens", "an integer >= 0", self.min_tokens)
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise _bad("min_tokens", f"<= max_tokens ({self.max_tokens})", self.min_tokens)

        self.stop = self._checked_stop(self.stop)
        self.stop_token_ids = self._checked_stop_token_ids(self.stop_token_ids)

        for name in ("ignore_eos", "include_stop_str_in_output", "skip_special_tokens"):
            if not isinstance(getattr(self, name), bool):
                raise _bad(name, "True or False", getattr(self, name))

        if self.seed is not None and not (_is_int(self.seed) and 0 <= self.seed < _U64):
            raise _bad("seed", "None or an integer in [0, 2**64)", self.seed)

    @staticmethod
    def _checked_stop(stop: Any) -> list[str]:
        valid = "None, a non-empty string or a list of non-empty strings"
        if stop is None:
            return []
        if isinstance(stop, str):
            stop = [stop]
        if not isinstance(stop, (list, tuple)):
            raise _bad("stop", valid, stop)
        for s in stop:
            # An empty stop string would match before any text and end every request at once.
            if not isinstance(s, str) or not s:
                raise _bad("stop", valid, s)
        return list(stop)

    @staticmethod
    def _checked_stop_token_ids(ids: Any) -> list[int]:
        valid = "None or a list of integers in [0, 2**31)"
        if ids is None:
            return []
        if not isinstance(ids, (list, tuple)):
            raise _bad("stop_token_ids", valid, ids)
        for i in ids:
            if not _is_int(i) or not 0 <= i <= _I32_MAX:
                raise _bad("stop_token_ids", valid, i)
        return list(ids)

    @property
    def is_greedy(self) -> bool:
        """True when the kernel should take the argmax (temperature 0, or top_k 1)."""
        return self.temperature < GREEDY_TEMPERATURE_EPS or self.top_k == 1

    def device_row(self, step: int, default_seed: int) -> tuple[float, float, float, float,
                                                                int, int, int, int]:
        """The values one row of the sampling kernel reads, packable with `DEVICE_ROW_FORMAT`.

        `(temperature f32, top_p f32, min_p f32, repetition_penalty f32, top_k i32,
        seed_lo u32, seed_hi u32, step u32)`. `step` is the index of the token being sampled
        (the kernel's counter-based RNG offset). Greedy rows carry temperature 0 and no
        top-k/top-p/min-p filter, which cannot change an argmax; the repetition penalty can,
        so it stays. `default_seed` (from `resolve_seed`) is used when `seed` is None.
        """
        if not (_is_int(step) and 0 <= step < _U32):
            raise ValueError(f"step must be an integer in [0, 2**32), got {step!r}")
        seed = self.seed if self.seed is not None else default_seed
        if not (_is_int(seed) and 0 <= seed < _U64):
            raise ValueError(f"default_seed must be an integer in [0, 2**64), got {seed!r}")
        lo, hi = seed & (_U32 - 1), seed >> 32
        if self.is_greedy:
            return (0.0, 1.0, 0.0, self.repetition_penalty, 0, lo, hi, step)
        return (self.temperature, self.top_p, self.min_p, self.repetition_penalty,
                self.top_k, lo, hi, step)


def resolve_seed(params: SamplingParams, rng: Any) -> int:
    """The request's 64-bit seed: `params.seed`, or one drawn from `rng` when it is None.

    Call once at request creation, so a request samples the same stream however it is batched.
    `rng` is a `random.Random` or a `numpy.random.Generator`.
    """
    if params.seed is not None:
        return params.seed
    if isinstance(rng, random.Random):
        return rng.getrandbits(64)
    # numpy Generator: draw two u32 halves, since integers() cannot reach 2**64 - 1 inclusively
    # for every dtype/version combination.
    lo, hi = (int(x) for x in rng.integers(0, _U32, size=2))
    return (hi << 32) | lo

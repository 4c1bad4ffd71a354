"""SamplingParams: validation messages, normalisation, greedy detection, the device row."""
from __future__ import annotations

import math
import random
import struct

import numpy as np
import pytest

from fixedgraph.errors import FixedGraphError, InvalidSamplingParams
from fixedgraph.sampling import DEVICE_ROW_FORMAT, SamplingParams, resolve_seed

# (field, bad value, text the message must hold: the valid range)
BAD_FIELDS = [
    ("temperature", -0.5, ">= 0"),
    ("temperature", math.inf, ">= 0"),
    ("temperature", math.nan, ">= 0"),
    ("temperature", "hot", ">= 0"),
    ("top_p", 0.0, "(0, 1]"),
    ("top_p", 1.5, "(0, 1]"),
    ("top_p", -0.1, "(0, 1]"),
    ("top_k", -2, "0 or -1"),
    ("top_k", 2.5, "0 or -1"),
    ("top_k", True, "0 or -1"),
    ("top_k", 2**31, "[1, 2**31)"),
    ("min_p", -0.01, "[0, 1]"),
    ("min_p", 1.01, "[0, 1]"),
    ("repetition_penalty", 0.0, "> 0"),
    ("repetition_penalty", -1.0, "> 0"),
    ("repetition_penalty", math.inf, "> 0"),
    ("presence_penalty", 2.5, "[-2, 2]"),
    ("presence_penalty", -2.01, "[-2, 2]"),
    ("frequency_penalty", 3, "[-2, 2]"),
    ("frequency_penalty", math.nan, "[-2, 2]"),
    ("max_tokens", 0, ">= 1"),
    ("max_tokens", -5, ">= 1"),
    ("max_tokens", 3.0, ">= 1"),
    ("min_tokens", -1, ">= 0"),
    ("min_tokens", 17, "<= max_tokens (16)"),
    ("stop", "", "non-empty"),
    ("stop", ["ok", ""], "non-empty"),
    ("stop", ["ok", 3], "non-empty"),
    ("stop", 7, "non-empty"),
    ("stop_token_ids", [1, -3], "[0, 2**31)"),
    ("stop_token_ids", 5, "list of integers"),
    ("stop_token_ids", [1.0], "list of integers"),
    ("ignore_eos", 1, "True or False"),
    ("include_stop_str_in_output", "yes", "True or False"),
    ("skip_special_tokens", None, "True or False"),
    ("seed", -1, "[0, 2**64)"),
    ("seed", 2**64, "[0, 2**64)"),
    ("seed", 1.5, "[0, 2**64)"),
]


@pytest.mark.parametrize("name,value,valid", BAD_FIELDS)
def test_bad_field_message_names_field_value_and_range(name, value, valid):
    with pytest.raises(InvalidSamplingParams) as info:
        SamplingParams(**{name: value})
    message = str(info.value)
    assert message.startswith(f"{name} must be "), message
    assert valid in message, message
    # The offending value is quoted; for list fields the offending element (the last, here).
    bad = value[-1] if isinstance(value, list) else value
    assert message.endswith(f"got {bad!r}"), message


def test_error_is_value_error_and_fixedgraph_error():
    with pytest.raises(ValueError):
        SamplingParams(top_p=1.5)
    with pytest.raises(FixedGraphError):
        SamplingParams(top_p=1.5)
    with pytest.raises(InvalidSamplingParams, match=r"^top_p must be in \(0, 1\], got 1.5$"):
        SamplingParams(top_p=1.5)


def test_defaults_follow_vllm():
    p = SamplingParams()
    assert (p.temperature, p.top_p, p.top_k, p.min_p) == (1.0, 1.0, 0, 0.0)
    assert (p.repetition_penalty, p.presence_penalty, p.frequency_penalty) == (1.0, 0.0, 0.0)
    assert (p.max_tokens, p.min_tokens, p.seed) == (16, 0, None)
    assert p.stop == [] and p.stop_token_ids == []
    assert not p.ignore_eos and not p.include_stop_str_in_output and p.skip_special_tokens
    assert not p.is_greedy
    assert not hasattr(p, "__dict__")  # slotted


def test_normalisation():
    assert SamplingParams(top_k=-1).top_k == 0
    assert SamplingParams(top_k=0).top_k == 0
    assert SamplingParams(stop="###").stop == ["###"]
    assert SamplingParams(stop=("a", "b")).stop == ["a", "b"]
    assert SamplingParams(stop_token_ids=(3, 4)).stop_token_ids == [3, 4]
    p = SamplingParams(temperature=1, top_p=1, repetition_penalty=2)
    assert type(p.temperature) is float and type(p.repetition_penalty) is float


def test_edges_that_are_valid():
    SamplingParams(temperature=0.0, top_p=1.0, min_p=1.0, top_k=2**31 - 1)
    SamplingParams(presence_penalty=-2.0, frequency_penalty=2.0, repetition_penalty=1e-3)
    SamplingParams(max_tokens=None, min_tokens=10_000)
    SamplingParams(max_tokens=5, min_tokens=5)
    SamplingParams(seed=0)
    SamplingParams(seed=2**64 - 1)


@pytest.mark.parametrize("kwargs,greedy", [
    ({"temperature": 0.0}, True),
    ({"temperature": 0}, True),
    ({"top_k": 1}, True),
    ({"temperature": 0.7, "top_k": 1}, True),
    ({"temperature": 0.7}, False),
    ({"temperature": 0.7, "top_k": 2}, False),
    ({"temperature": 1e-3}, False),
])
def test_is_greedy(kwargs, greedy):
    assert SamplingParams(**kwargs).is_greedy is greedy


def test_device_row_order_and_types():
    p = SamplingParams(temperature=0.8, top_p=0.9, min_p=0.05, repetition_penalty=1.1, top_k=40,
                       seed=0x1234_5678_9ABC_DEF0)
    row = p.device_row(step=7, default_seed=99)
    assert row == (0.8, 0.9, 0.05, 1.1, 40, 0x9ABC_DEF0, 0x1234_5678, 7)
    assert [type(v) for v in row] == [float] * 4 + [int] * 4
    # Every value fits its declared type: packing would raise otherwise.
    packed = struct.pack(DEVICE_ROW_FORMAT, *row)
    assert len(packed) == 32
    lo, hi = struct.unpack_from("<II", packed, 20)
    assert (hi << 32) | lo == p.seed


def test_device_row_greedy_and_default_seed():
    p = SamplingParams(temperature=0.0, top_p=0.5, top_k=50, min_p=0.2, repetition_penalty=1.3)
    seed = (5 << 32) | 11
    assert p.device_row(0, seed) == (0.0, 1.0, 0.0, 1.3, 0, 11, 5, 0)
    q = SamplingParams(temperature=0.9, top_k=1)
    assert q.device_row(3, seed)[0] == 0.0


def test_device_row_rejects_out_of_range():
    p = SamplingParams()
    with pytest.raises(ValueError, match="step"):
        p.device_row(2**32, 0)
    with pytest.raises(ValueError, match="step"):
        p.device_row(-1, 0)
    with pytest.raises(ValueError, match="default_seed"):
        p.device_row(0, -1)
    with pytest.raises(ValueError, match="default_seed"):
        p.device_row(0, None)


def test_resolve_seed():
    assert resolve_seed(SamplingParams(seed=42), random.Random(0)) == 42
    a = [resolve_seed(SamplingParams(), random.Random(1)) for _ in range(2)]
    assert a[0] == a[1]  # reproducible from the engine's rng
    rng = random.Random(2)
    seeds = {resolve_seed(SamplingParams(), rng) for _ in range(100)}
    assert len(seeds) == 100 and all(0 <= s < 2**64 for s in seeds)
    assert any(s >= 2**32 for s in seeds)  # the high word is used
    gen = np.random.default_rng(3)
    seeds = {resolve_seed(SamplingParams(), gen) for _ in range(100)}
    assert len(seeds) == 100 and all(type(s) is int and 0 <= s < 2**64 for s in seeds)
    assert any(s >= 2**32 for s in seeds)

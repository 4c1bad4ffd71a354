"""The default prefill pass size (engine.default_prefill_chunk): wide on a GPU, capped by the context."""
import pytest

from fixedgraph.engine import default_prefill_chunk


def test_gpu_default_is_wide_and_capped_by_the_context():
    assert default_prefill_chunk("cuda", 40960) == 2048
    assert default_prefill_chunk("cuda", 2048) == 2048
    assert default_prefill_chunk("cuda", 300) == 512  # the context rounded up to a power of two
    assert default_prefill_chunk("cuda", 5) == 16  # never below the smallest bucket


def test_reference_default_stays_small():
    assert default_prefill_chunk("reference", 4096) == 256
    assert default_prefill_chunk("reference", 100) == 128


def test_environment_overrides_and_is_checked():
    assert default_prefill_chunk("cuda", 40960, "512") == 512
    assert default_prefill_chunk("reference", 100, "4096") == 128
    for bad in ("300", "8", "lots"):
        with pytest.raises(ValueError, match="FIXEDGRAPH_PREFILL_CHUNK"):
            default_prefill_chunk("cuda", 4096, bad)

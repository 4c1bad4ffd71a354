"""decode_mega's sizing and op table (fixedgraph/ops/mega.py), host only."""
import numpy as np
import pytest

from fixedgraph.models.config import ModelConfig
from fixedgraph.models.dense import DenseDecoder, Sizes, mega_wanted
from fixedgraph.ops import mega
from fixedgraph.testing.checkpoints import CONFIGS


def _cfg(name: str) -> ModelConfig:
    cls, kw = CONFIGS[name]
    d = dict(kw, architectures=[cls.replace("Config", "ForCausalLM")], model_type=cls[:-6].lower())
    return ModelConfig.from_hf_dict(d)


def test_ring_fits_shared_memory_and_holds_a_row_of_every_op():
    for name in ("qwen3-0.6b", "qwen3-8b", "llama3-8b", "qwen2.5-0.5b", "llama3.2-1b"):
        s = mega.shape_of(_cfg(name), 132)
        slot, stages = s.ring()
        assert 2 <= stages <= mega.MAX_STAGES and slot % 16 == 0
        assert s.shared + mega.STATIC_SMEM <= mega.SMEM_PER_BLOCK
        assert slot >= max(4 * s.H, 2 * s.Hq * s.D, 2 * s.I)
    s = mega.shape_of(_cfg("qwen3-0.6b"), 132)
    assert s.ring() == (32 * 1024, 6)  # session 40-41's best ring on this model


def test_table_names_every_op_and_region(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    cfg = _cfg("qwen3-0.6b")
    model = DenseDecoder(cfg, Sizes(widths=(1,), chunk_buckets=(64,), block_size=16, num_blocks=65,
                                    max_model_len=1024, ring_len=16))
    plan = model.plan()
    assert plan["embed"].offset == 0  # the kernel's base pointer
    t = model.boot_tables(plan)["mega.table"]
    assert t.size == plan["mega.table"].numel and t[25] == t.size * 4 >= 4 * (mega.HDR + mega.OPW * int(t[0]))
    nops = int(t[0])
    ops = t[mega.HDR:].reshape(-1, mega.OPW)[:nops]
    kinds = ops[:, 0].tolist()
    assert kinds == [mega.MK_QKV, mega.MK_ATTN, mega.MK_MERGE, mega.MK_ORES, mega.MK_SILU, mega.MK_ORES] * 28 + [
        mega.MK_HEAD, mega.MK_PICK]
    assert ops[0, 9] == mega.FLAG_X_PLAIN and ops[3, 9] == mega.FLAG_RES_PLAIN and ops[6, 9] == 0
    # every address is 16-byte aligned and inside the arena
    addr_cols = [3, 4, 5, 6, 7, 8, 10, 11]
    vals = ops[:, addr_cols].ravel()
    vals = vals[vals != mega.NONE]
    assert (vals.astype(np.int64) * 16 < plan.total_bytes).all()
    assert ops[6 * 27 + 5, 7] * 16 == plan["mega.L27.h2"].offset and ops[-2, 4] * 16 == plan["mega.L27.h2"].offset


def test_knob_and_unsupported_models(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "2")
    with pytest.raises(ValueError, match="FIXEDGRAPH_MEGA"):
        mega_wanted()
    assert "head_dim" in mega.unsupported(_cfg("tiny-odd")) or "multiples of 8" in mega.unsupported(_cfg("tiny-odd"))
    assert mega.unsupported(_cfg("qwen3-0.6b")) is None


def test_an_unsupported_model_warns_and_keeps_the_graph(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    sizes = Sizes(widths=(1,), chunk_buckets=(64,), block_size=16, num_blocks=9, max_model_len=128, ring_len=16)
    with pytest.warns(UserWarning, match="stay graphs of launches"):
        model = DenseDecoder(_cfg("tiny-odd"), sizes)
    assert model.mega is None and model.boot_tables(model.plan()) == {}
    assert "decode_mega" not in [op.entry for op in model.decode_program(1, False).ops]


def test_quiet_policy_word(monkeypatch):
    """FIXEDGRAPH_MEGA_QUIET lands in header word 26 (the loader's pauses); bad values are refused."""
    monkeypatch.setenv("FIXEDGRAPH_MEGA", "1")
    sizes = Sizes(widths=(1,), chunk_buckets=(64,), block_size=16, num_blocks=65, max_model_len=1024, ring_len=16)
    model = DenseDecoder(_cfg("qwen3-0.6b"), sizes)
    plan = model.plan()
    assert model.boot_tables(plan)["mega.table"][mega.QUIET_WORD] == 0
    monkeypatch.setenv("FIXEDGRAPH_MEGA_QUIET", "3")
    assert model.boot_tables(plan)["mega.table"][mega.QUIET_WORD] == mega.QUIET_ATTN | mega.QUIET_QKV
    monkeypatch.setenv("FIXEDGRAPH_MEGA_QUIET", "4")
    with pytest.raises(ValueError, match="FIXEDGRAPH_MEGA_QUIET must be"):
        model.boot_tables(plan)

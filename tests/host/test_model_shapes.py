"""Launch plans of public models' shapes (random-weight configs of fixedgraph.testing.checkpoints):
every decode and prefill program builds, with launches the GPU accepts. Host only: the programs
are built from the config alone (no weights, no GPU); the GPU runs of these shapes are in
docs/BENCHMARKS.md (Llama-3-8B since session 21)."""
import pytest

pytest.importorskip("transformers")

from fixedgraph.models.config import ModelConfig  # noqa: E402
from fixedgraph.models.dense import DenseDecoder, Sizes  # noqa: E402
from fixedgraph.ops import gemv  # noqa: E402
from fixedgraph.testing.checkpoints import hf_config  # noqa: E402

MODELS = ["qwen3-0.6b", "qwen3-8b", "llama3-8b", "qwen2.5-0.5b", "qwen2.5-7b", "llama3.2-1b", "llama3.2-3b",
          "mistral-7b", "qwen3-4b", "qwen3-14b", "smollm2-1.7b", "smollm2-360m"]


@pytest.mark.parametrize("name", MODELS)
def test_programs_build_with_valid_launches(name):
    cfg = ModelConfig.from_hf_dict(hf_config(name).to_dict())
    max_len = min(cfg.max_position_embeddings, 32768)
    chunks = (16, 32, 64, 128, 256, 512, 1024, 2048)  # the engine's buckets for 2048-token passes
    sizes = Sizes(widths=(1,), chunk_buckets=chunks, block_size=16, num_blocks=-(-max_len // 16) + 1,
                  max_model_len=max_len, ring_len=16)
    dec = DenseDecoder(cfg, sizes)
    H, I, D, L = cfg.hidden_size, cfg.intermediate_size, cfg.head_dim, cfg.num_layers
    params = cfg.vocab_size * H * (1 if cfg.tie_word_embeddings else 2) + L * (
        H * (cfg.num_heads + 2 * cfg.num_kv_heads) * D + cfg.num_heads * D * H + 3 * H * I)
    kv = 2 * L * max_len * cfg.num_kv_heads * D * 2
    assert dec.plan().total_bytes >= 2 * params + kv  # bf16 weights and the KV pools, at least
    programs = [dec.decode_program(1, sampling, ctx, steps) for ctx in dec.ctx_buckets
                for sampling in (False, True) for steps in (1, 4)]
    programs += [dec.prefill_program(c, sampling) for c in (chunks[0], chunks[-1]) for sampling in (False, True)]
    for prog in programs:
        assert prog.launches, prog
        for op in prog.launches:
            threads = op.block[0] * op.block[1] * op.block[2]
            assert 32 <= threads <= 1024 and threads % 32 == 0, (name, op.label, op.block)
            assert op.grid[0] >= 1 and 1 <= op.grid[1] <= 65535 and 1 <= op.grid[2] <= 65535, (name, op.label, op.grid)
            assert 0 <= op.shared <= gemv.SMEM_PER_BLOCK, (name, op.label, op.shared)


def test_attention_splits_follow_the_gpus_sm_count():
    """Sizes.num_sms (the engine sets the device's) reaches the attention's split plans: one CTA
    per SM of *this* GPU in a bucket under the streaming limit, two per SM past it."""
    cfg = ModelConfig.from_hf_dict(hf_config("qwen3-0.6b").to_dict())  # 8 kv heads
    common = dict(widths=(1,), chunk_buckets=(16,), block_size=16, num_blocks=8193, max_model_len=16384, ring_len=16)
    h200 = DenseDecoder(cfg, Sizes(**common))
    small = DenseDecoder(cfg, Sizes(**common, num_sms=78))
    assert h200.splits[(1, 2048)] == 132 // 8 and small.splits[(1, 2048)] == 78 // 8
    assert h200.splits[(1, 16384)] == 32 and small.splits[(1, 16384)] == 2 * 78 // 8
    assert small.splits[(1, 6144)] == 2 * 78 // 8  # 24 MiB is past 78/132 of the limit

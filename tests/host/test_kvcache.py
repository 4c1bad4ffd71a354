"""BlockAllocator: invariants under random workloads checked against a simple model."""
from __future__ import annotations

import random

import pytest

from fixedgraph.errors import ContextOverflow, FixedGraphError, KVPoolExhausted
from fixedgraph.kvcache import DUMMY_BLOCK, BlockAllocator


def ceil_div(a: int, b: int) -> int:
    return (a + b - 1) // b


def snapshot(alloc: BlockAllocator, seq_ids) -> tuple:
    return (alloc.num_free_blocks, alloc.num_used_blocks, alloc.num_seqs,
            {s: alloc.block_table(s) for s in seq_ids})


def check_invariants(alloc: BlockAllocator, model: dict[int, int]) -> None:
    """`model` maps seq_id -> tokens it must have room for; the allocator must agree."""
    owned: list[int] = []
    for seq_id, num_tokens in model.items():
        table = alloc.block_table(seq_id)
        assert len(table) == ceil_div(num_tokens, alloc.block_size)
        assert len(table) <= alloc.max_blocks_per_seq
        owned.extend(table)
    assert len(owned) == len(set(owned)), "a block is owned twice"
    assert DUMMY_BLOCK not in owned, "the dummy block was handed out"
    assert all(1 <= b < alloc.num_blocks for b in owned)
    assert alloc.num_used_blocks == len(owned)
    assert alloc.num_free_blocks == alloc.num_blocks - 1 - len(owned)
    assert alloc.num_seqs == len(model)


def check_slots(alloc: BlockAllocator, model: dict[int, int], rng: random.Random) -> None:
    """Slots follow the formula, stay in the sequence's blocks and never collide."""
    bs = alloc.block_size
    seen: dict[int, tuple[int, int]] = {}
    for seq_id, num_tokens in model.items():
        table = alloc.block_table(seq_id)
        positions = range(num_tokens) if num_tokens <= 64 else rng.sample(range(num_tokens), 64)
        for pos in positions:
            slot = alloc.slot(seq_id, pos)
            assert slot == table[pos // bs] * bs + pos % bs
            assert slot // bs != DUMMY_BLOCK
            assert slot not in seen, f"slot {slot} of {(seq_id, pos)} also used by {seen[slot]}"
            seen[slot] = (seq_id, pos)


@pytest.mark.parametrize("seed,num_blocks,block_size,max_blocks", [
    (0, 16, 4, 8), (1, 64, 16, 64), (2, 200, 1, 50), (3, 9, 32, 3), (4, 128, 8, None),
])
def test_random_workload_matches_model(seed, num_blocks, block_size, max_blocks):
    rng = random.Random(seed)
    alloc = BlockAllocator(num_blocks, block_size, max_blocks)
    max_tokens = alloc.max_tokens_per_seq
    model: dict[int, int] = {}
    next_id = 0
    counts = {"exhausted": 0, "overflow": 0, "allocate": 0, "ensure": 0, "free": 0}
    for _ in range(3000):
        op = rng.random()
        if op < 0.35:
            num_tokens = rng.randint(0, max_tokens + block_size)
            free_before = num_blocks - 1 - sum(ceil_div(t, block_size) for t in model.values())
            need = ceil_div(num_tokens, block_size)
            expect_ok = num_tokens <= max_tokens and need <= free_before
            assert alloc.can_allocate(num_tokens) is expect_ok
            before = snapshot(alloc, model)
            try:
                table = alloc.allocate(next_id, num_tokens)
            except (KVPoolExhausted, ContextOverflow) as e:
                assert not expect_ok
                kind = "overflow" if num_tokens > max_tokens else "exhausted"
                assert isinstance(e, ContextOverflow if kind == "overflow" else KVPoolExhausted)
                counts[kind] += 1
                assert snapshot(alloc, model) == before  # all or nothing
                assert next_id not in alloc
            else:
                assert expect_ok
                counts["allocate"] += 1
                assert table == alloc.block_table(next_id)
                model[next_id] = num_tokens
            next_id += 1
        elif op < 0.8 and model:
            seq_id = rng.choice(list(model))
            grow = rng.choice([1, 1, 1, rng.randint(0, 3 * block_size)])
            num_tokens = model[seq_id] + grow
            old_table = alloc.block_table(seq_id)
            need = ceil_div(num_tokens, block_size) - len(old_table)
            free_before = alloc.num_free_blocks
            assert alloc.num_new_blocks(seq_id, num_tokens) == max(need, 0)
            before = snapshot(alloc, model)
            try:
                added = alloc.ensure(seq_id, num_tokens)
            except ContextOverflow:
                assert num_tokens > max_tokens
                counts["overflow"] += 1
                assert snapshot(alloc, model) == before
            except KVPoolExhausted:
                assert num_tokens <= max_tokens and need > free_before
                counts["exhausted"] += 1
                assert snapshot(alloc, model) == before
            else:
                assert num_tokens <= max_tokens and max(need, 0) <= free_before
                counts["ensure"] += 1
                # Blocks never move: the old table is a prefix, and `added` is the rest.
                assert alloc.block_table(seq_id) == old_table + added
                assert len(added) == max(need, 0)
                model[seq_id] = num_tokens
        elif model:
            seq_id = rng.choice(list(model))
            alloc.free(seq_id)
            del model[seq_id]
            counts["free"] += 1
            assert seq_id not in alloc
        check_invariants(alloc, model)
        if rng.random() < 0.05:
            check_slots(alloc, model, rng)
    # The workload must have exercised every path, or the test proves little.
    assert all(n > 0 for n in counts.values()), counts
    for seq_id in list(model):
        alloc.free(seq_id)
    assert alloc.num_free_blocks == num_blocks - 1 and alloc.num_used_blocks == 0


def test_dummy_block_never_handed_out_even_when_full():
    alloc = BlockAllocator(num_blocks=8, block_size=2)
    assert alloc.allocate(0, 14) == [1, 2, 3, 4, 5, 6, 7]
    assert alloc.num_free_blocks == 0 and not alloc.can_allocate(1)
    assert alloc.can_allocate(0)
    with pytest.raises(KVPoolExhausted):
        alloc.allocate(1, 1)


def test_lifo_reuses_recently_freed_first():
    alloc = BlockAllocator(num_blocks=32, block_size=4)
    alloc.allocate(0, 8)   # [1, 2]
    alloc.allocate(1, 12)  # [3, 4, 5]
    alloc.allocate(2, 4)   # [6]
    alloc.free(1)
    assert alloc.allocate(3, 12) == [3, 4, 5]
    alloc.free(2)
    alloc.free(0)
    # Most recently freed (seq 0's blocks) come out first, then seq 2's, then fresh ones.
    assert alloc.allocate(4, 16) == [1, 2, 6, 7]


def test_ensure_grows_only_at_block_boundaries():
    alloc = BlockAllocator(num_blocks=16, block_size=4)
    assert alloc.allocate(7, 3) == [1]
    assert alloc.ensure(7, 4) == []
    assert alloc.ensure(7, 5) == [2]
    assert alloc.ensure(7, 2) == []  # never shrinks
    assert alloc.block_table(7) == [1, 2]
    assert alloc.slot(7, 5) == 2 * 4 + 1
    with pytest.raises(IndexError, match="call ensure"):
        alloc.slot(7, 8)
    with pytest.raises(IndexError):
        alloc.slot(7, -1)
    assert alloc.padded_block_table(7) == [1, 2] + [DUMMY_BLOCK] * 13


def test_error_messages():
    alloc = BlockAllocator(num_blocks=9, block_size=16, max_blocks_per_seq=4)
    with pytest.raises(ContextOverflow, match=r"^prompt of 65 tokens exceeds the context of 64 "
                                              r"tokens; shorten the prompt or raise "
                                              r"--max-model-len$"):
        alloc.allocate(0, 65)
    alloc.allocate(0, 64)
    with pytest.raises(ContextOverflow, match="sequence 0 needs 65 tokens.*--max-model-len"):
        alloc.ensure(0, 65)
    alloc.allocate(1, 60)
    with pytest.raises(KVPoolExhausted) as info:
        alloc.allocate(2, 1)
    assert str(info.value) == (
        "KV pool exhausted: sequence 2 needs 1 more blocks but only 0 are free (8 blocks in use "
        "by 2 sequences); raise --kv-blocks or lower --max-seqs")
    assert isinstance(info.value, FixedGraphError)


def test_misuse_is_reported():
    alloc = BlockAllocator(num_blocks=4, block_size=4)
    alloc.allocate(1, 4)
    with pytest.raises(ValueError, match="already holds"):
        alloc.allocate(1, 4)
    with pytest.raises(KeyError):
        alloc.free(2)
    with pytest.raises(KeyError):
        alloc.ensure(2, 4)
    with pytest.raises(KeyError):
        alloc.block_table(2)
    with pytest.raises(ValueError):
        BlockAllocator(num_blocks=1, block_size=4)
    with pytest.raises(ValueError):
        BlockAllocator(num_blocks=4, block_size=0)

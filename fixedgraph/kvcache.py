"""Paged KV cache block allocation: which pool blocks each sequence owns.

Host-only bookkeeping over the fixed K/V pools ([num_blocks, block_size, kv_heads, head_dim]
per layer). The device never learns about allocation; it only reads block-table rows and KV
write slots that the engine derives from here.
"""
from __future__ import annotations

from fixedgraph.errors import ContextOverflow, KVPoolExhausted

# Block 0 is never handed out: padding rows of a wide graph point their block table and KV write
# slots at it, so it is scratch that no live sequence reads.
DUMMY_BLOCK = 0


class BlockAllocator:
    """Hands out KV pool blocks to sequences, all or nothing.

    Blocks 1..num_blocks-1 are allocatable; `DUMMY_BLOCK` (0) is reserved. A sequence holds
    ceil(num_tokens / block_size) blocks, at most `max_blocks_per_seq`, so its length is at most
    `max_blocks_per_seq * block_size` tokens (the context). The free list is a LIFO stack:
    recently freed blocks are reused first, while they are likely still warm in L2.
    """

    def __init__(self, num_blocks: int, block_size: int, max_blocks_per_seq: int | None = None):
        if num_blocks < 2:
            raise ValueError(
                f"num_blocks must be >= 2 (block 0 is the dummy block), got {num_blocks}")
        if block_size < 1:
            raise ValueError(f"block_size must be >= 1, got {block_size}")
        if max_blocks_per_seq is None:
            max_blocks_per_seq = num_blocks - 1
        if max_blocks_per_seq < 1:
            raise ValueError(f"max_blocks_per_seq must be >= 1, got {max_blocks_per_seq}")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.max_blocks_per_seq = max_blocks_per_seq
        # Reversed so the first allocations pop 1, 2, 3, ... (readable block tables in tests/logs).
        self._free: list[int] = list(range(num_blocks - 1, DUMMY_BLOCK, -1))
        self._tables: dict[int, list[int]] = {}

    # -- sizes ---------------------------------------------------------------------------------

    @property
    def max_tokens_per_seq(self) -> int:
        """The context: the most tokens one sequence can hold."""
        return self.max_blocks_per_seq * self.block_size

    @property
    def num_free_blocks(self) -> int:
        return len(self._free)

    @property
    def num_used_blocks(self) -> int:
        """Blocks owned by sequences (the dummy block is neither free nor used)."""
        return self.num_blocks - 1 - len(self._free)

    @property
    def num_seqs(self) -> int:
        return len(self._tables)

    def num_blocks_for(self, num_tokens: int) -> int:
        """Blocks needed to hold `num_tokens` tokens."""
        return -(-num_tokens // self.block_size)

    def __contains__(self, seq_id: int) -> bool:
        return seq_id in self._tables

    def can_allocate(self, num_tokens: int) -> bool:
        """Whether a new sequence of `num_tokens` tokens fits both the context and the pool."""
        need = self.num_blocks_for(num_tokens)
        return 0 <= num_tokens and need <= self.max_blocks_per_seq and need <= len(self._free)

    def num_new_blocks(self, seq_id: int, num_tokens: int) -> int:
        """Blocks `ensure(seq_id, num_tokens)` would add (0 when it already has room)."""
        return max(0, self.num_blocks_for(num_tokens) - len(self._table(seq_id)))

    # -- allocation ----------------------------------------------------------------------------

    def allocate(self, seq_id: int, num_tokens: int) -> list[int]:
        """Give a new sequence blocks for its first `num_tokens` tokens (its prompt).

        Raises ContextOverflow past the context, KVPoolExhausted when too few blocks are free;
        either way nothing changes. Returns the sequence's block table.
        """
        if seq_id in self._tables:
            raise ValueError(f"sequence {seq_id} already holds KV blocks; free it first")
        if num_tokens < 0:
            raise ValueError(f"num_tokens must be >= 0, got {num_tokens}")
        if num_tokens > self.max_tokens_per_seq:
            raise ContextOverflow(
                f"prompt of {num_tokens} tokens exceeds the context of {self.max_tokens_per_seq} "
                f"tokens; shorten the prompt or raise --max-model-len")
        table: list[int] = []
        self._grow(seq_id, table, self.num_blocks_for(num_tokens))
        self._tables[seq_id] = table
        return list(table)

    def ensure(self, seq_id: int, num_tokens: int) -> list[int]:
        """Grow a sequence so it can hold `num_tokens` tokens; returns the newly added block ids.

        Never shrinks. Raises ContextOverflow past the context and KVPoolExhausted when too few
        blocks are free; either way nothing changes.
        """
        table = self._table(seq_id)
        if num_tokens > self.max_tokens_per_seq:
            raise ContextOverflow(
                f"sequence {seq_id} needs {num_tokens} tokens, past the context of "
                f"{self.max_tokens_per_seq} tokens; stop it at the context limit or raise "
                f"--max-model-len")
        old = len(table)
        self._grow(seq_id, table, self.num_blocks_for(num_tokens) - old)
        return table[old:]

    def _grow(self, seq_id: int, table: list[int], num_new: int) -> None:
        if num_new <= 0:
            return
        # NOTE: check before popping anything, so a failed allocation changes nothing.
        if num_new > len(self._free):
            raise KVPoolExhausted(
                f"KV pool exhausted: sequence {seq_id} needs {num_new} more blocks but only "
                f"{len(self._free)} are free ({self.num_used_blocks} blocks in use by "
                f"{len(self._tables)} sequences); raise --kv-blocks or lower --max-seqs")
        free = self._free
        table.extend(free.pop() for _ in range(num_new))

    def free(self, seq_id: int) -> None:
        """Return all of a sequence's blocks to the pool; its KV contents become garbage."""
        table = self._tables.pop(seq_id, None)
        if table is None:
            raise KeyError(f"sequence {seq_id} holds no KV blocks")
        # Pushed last-first so the next allocation pops them back in the same order.
        self._free.extend(reversed(table))

    # -- addressing ----------------------------------------------------------------------------

    def _table(self, seq_id: int) -> list[int]:
        table = self._tables.get(seq_id)
        if table is None:
            raise KeyError(f"sequence {seq_id} holds no KV blocks; allocate it first")
        return table

    def block_table(self, seq_id: int) -> list[int]:
        """A copy of the sequence's block ids, in token order."""
        return list(self._table(seq_id))

    def padded_block_table(self, seq_id: int) -> list[int]:
        """The block table padded with `DUMMY_BLOCK` to `max_blocks_per_seq` (one device row)."""
        table = self._table(seq_id)
        return table + [DUMMY_BLOCK] * (self.max_blocks_per_seq - len(table))

    def slot(self, seq_id: int, position: int) -> int:
        """The KV pool slot of token `position`: block_id * block_size + position % block_size."""
        table = self._table(seq_id)
        index, offset = divmod(position, self.block_size)
        if position < 0 or index >= len(table):
            raise IndexError(
                f"position {position} is outside sequence {seq_id}'s "
                f"{len(table) * self.block_size} allocated tokens; call ensure() first")
        return table[index] * self.block_size + offset

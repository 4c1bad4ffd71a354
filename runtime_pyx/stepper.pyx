# cython: boundscheck=False, wraparound=False, cdivision=True, initializedcheck=False
"""The decode loop's per-step host work, in C.

Per decode step the host writes a few scalars of metadata into a pinned staging slot (the
token's position, its KV write slot, the sequence length, the step number and, when sampling,
the RNG counter) and marks the step's token-ring entry as pending; then one graph launch runs k
such steps. ``DecodeStager.stage`` does the writes of a launch's k steps in one call without the
GIL, from byte offsets the caller takes from the model's metadata layout: it knows no model and
no CUDA. ``RingWaiter`` spins on a token-ring entry until the GPU publishes it, without
the GIL (an application's other Python threads run meanwhile). ``StepHistory`` records the host's time per step (wall, launch call, thread CPU) into
preallocated arrays, k steps at a time. The Python decode loop (``fixedgraph.runner``) keeps what
is rare or needs Python objects: growing the block table, choosing the graph, waiting for tokens.
"""
from libc.stdint cimport int32_t, int64_t, uint32_t
from libc.string cimport memcpy
from posix.time cimport CLOCK_MONOTONIC, clock_gettime, timespec

cdef extern from *:
    """
    static inline void fg_cpu_relax(void) {
    #if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
    #elif defined(__aarch64__)
        __asm__ __volatile__("yield");
    #endif
    }
    static inline int fg_load_i32(const int *p) { return *(const volatile int *)p; }
    """
    void fg_cpu_relax() noexcept nogil
    int32_t fg_load_i32(const int32_t *p) noexcept nogil


cdef inline double _now() noexcept nogil:
    cdef timespec ts
    clock_gettime(CLOCK_MONOTONIC, &ts)
    return <double>ts.tv_sec + <double>ts.tv_nsec * 1e-9


# Stores at byte offsets the layout gives (memcpy: no alignment assumed). The i32 seq_len goes
# through _put32 too: its values are non-negative, the same bits as u32.
cdef inline void _put32(unsigned char *p, uint32_t v) noexcept nogil:
    memcpy(p, &v, 4)


cdef inline void _put64(unsigned char *p, int64_t v) noexcept nogil:
    memcpy(p, &v, 8)


cdef class DecodeStager:
    """Writes width-1 decode steps' metadata into ``num_slots`` staging slots of ``slot_bytes``
    each (slot ``p % num_slots`` for pass ``p``), and their token-ring entries.

    ``offsets``: byte offsets within a slot of ``positions`` (u32), ``slot`` (i64), ``seq_len``
    (i32), ``step`` (u32) and ``counter`` (u32: the sampling row's RNG counter word). The block
    table of the current sequence is the stager's own (``set_table``, ``append_block``).
    ``pending``: the value a ring entry holds until the GPU publishes its token."""

    cdef unsigned char[::1] _blob
    cdef int32_t[::1] _ring
    cdef int32_t[::1] _table
    cdef Py_ssize_t slot_bytes, num_slots, ring_len, max_blocks
    cdef Py_ssize_t off_pos, off_slot, off_seq_len, off_step, off_ctr
    cdef int64_t block_size
    cdef int32_t pending
    cdef readonly Py_ssize_t table_len

    def __init__(self, staging, Py_ssize_t slot_bytes, Py_ssize_t num_slots, dict offsets, ring,
                 int64_t block_size, Py_ssize_t max_blocks, int32_t pending=-1):
        self._blob = staging
        self._ring = ring
        if slot_bytes < 1 or num_slots < 1 or num_slots * slot_bytes > self._blob.shape[0]:
            raise ValueError(f"{num_slots} staging slots of {slot_bytes} bytes do not fit the "
                             f"{self._blob.shape[0]}-byte staging buffer")
        if self._ring.shape[0] < 1:
            raise ValueError("the token ring is empty")
        if block_size < 1 or max_blocks < 1:
            raise ValueError(f"block_size {block_size} and max_blocks {max_blocks} must be positive")
        sizes = {"positions": 4, "slot": 8, "seq_len": 4, "step": 4, "counter": 4}
        for name, size in sizes.items():
            if name not in offsets:
                raise ValueError(f"no offset given for the metadata field {name!r}")
            off = offsets[name]
            if off < 0 or off + size > slot_bytes:
                raise ValueError(f"field {name!r} at byte {off} ({size} bytes) is outside a "
                                 f"{slot_bytes}-byte slot")
        self.off_pos, self.off_slot = offsets["positions"], offsets["slot"]
        self.off_seq_len, self.off_step = offsets["seq_len"], offsets["step"]
        self.off_ctr = offsets["counter"]
        self.slot_bytes, self.num_slots = slot_bytes, num_slots
        self.ring_len = self._ring.shape[0]
        self.block_size, self.max_blocks = block_size, max_blocks
        self.pending = pending
        self._table = memoryview(bytearray(4 * max_blocks)).cast("i")
        self.table_len = 0

    def set_table(self, blocks) -> None:
        """The current sequence's block table (block ids in order)."""
        n = len(blocks)
        if n > self.max_blocks:
            raise ValueError(f"a block table of {n} blocks exceeds max_blocks {self.max_blocks}")
        for i in range(n):
            self._table[i] = blocks[i]
        self.table_len = n

    def append_block(self, int32_t block) -> None:
        """The sequence grew by one block."""
        if self.table_len >= self.max_blocks:
            raise ValueError(f"the block table is full ({self.max_blocks} blocks)")
        self._table[self.table_len] = block
        self.table_len += 1

    cpdef stage(self, int64_t passes, int64_t first, int k, int64_t n, bint sampling):
        """Steps ``first`` .. ``first + k - 1`` of a sequence whose prompt has ``n`` tokens (step
        s decodes position n + s - 1), into the slots of passes ``passes`` .. ``passes + k - 1``;
        each step's ring entry (step % ring length) set to ``pending``. Nothing is written when
        the table lacks a step's block."""
        cdef int64_t last = n + first + k - 2
        if k < 1 or first < 1 or n < 1 or passes < 0:
            raise ValueError(f"bad decode steps: first {first}, k {k}, prompt {n}, pass {passes}")
        if last // self.block_size >= self.table_len:
            raise IndexError(f"position {last} needs block {last // self.block_size} but the table "
                             f"holds {self.table_len}: grow it first")
        cdef unsigned char *base = &self._blob[0]
        cdef int32_t *ring = &self._ring[0]
        cdef int32_t *table = &self._table[0]
        cdef int64_t step, pos, bs = self.block_size
        cdef unsigned char *slot
        cdef int i
        with nogil:
            for i in range(k):
                step = first + i
                pos = n + step - 1
                slot = base + ((passes + i) % self.num_slots) * self.slot_bytes
                _put32(slot + self.off_pos, <uint32_t>pos)
                _put64(slot + self.off_slot, <int64_t>table[pos // bs] * bs + pos % bs)
                _put32(slot + self.off_seq_len, <uint32_t>(pos + 1))
                _put32(slot + self.off_step, <uint32_t>step)
                if sampling:
                    _put32(slot + self.off_ctr, <uint32_t>step)
                ring[step % self.ring_len] = self.pending


cdef class StepHistory:
    """Host time per decode step: running totals and the last ``capacity`` steps' wall time,
    launch-call time and thread CPU time (seconds), in the caller's float64 arrays."""

    cdef double[::1] _step, _launch, _cpu
    cdef Py_ssize_t capacity
    cdef readonly long long count
    cdef readonly double step_total, cpu_total

    def __init__(self, step, launch, cpu):
        self._step, self._launch, self._cpu = step, launch, cpu
        self.capacity = self._step.shape[0]
        if self.capacity < 1 or self._launch.shape[0] != self.capacity or self._cpu.shape[0] != self.capacity:
            raise ValueError("the three history arrays must have the same, positive length")
        self.reset()

    def reset(self) -> None:
        self.count = 0
        self.step_total = self.cpu_total = 0.0

    cpdef record(self, double dt, double dl, double dc, int k):
        """k steps of a launch, each ``dt`` s of host time, ``dl`` of it in the launch call,
        ``dc`` s of thread CPU time."""
        cdef int i
        cdef Py_ssize_t h
        for i in range(k):
            h = self.count % self.capacity
            self._step[h] = dt
            self._launch[h] = dl
            self._cpu[h] = dc
            self.count += 1
        self.step_total += dt * k
        self.cpu_total += dc * k


cdef class RingWaiter:
    """Waits for an entry of the host-mapped token ring to change from its pending value, spinning
    without the GIL (the other Python threads of the process run meanwhile)."""

    cdef int32_t[::1] _ring

    def __init__(self, ring):
        self._ring = ring
        if self._ring.shape[0] < 1:
            raise ValueError("the token ring is empty")

    cpdef int32_t wait(self, Py_ssize_t idx, int32_t pending, double timeout_s) except? -2147483648:
        """The entry's value once it is not ``pending``, or ``pending`` when ``timeout_s`` seconds
        passed first."""
        if idx < 0 or idx >= self._ring.shape[0]:
            raise IndexError(f"ring entry {idx} is outside the {self._ring.shape[0]}-entry ring")
        cdef const int32_t *p = &self._ring[idx]
        cdef int32_t v
        cdef double deadline
        with nogil:
            v = fg_load_i32(p)
            if v == pending:
                deadline = _now() + timeout_s
                while True:
                    fg_cpu_relax()
                    v = fg_load_i32(p)
                    if v != pending or _now() >= deadline:
                        break
        return v

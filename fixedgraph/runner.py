"""Run sequences on a booted model: chunked prefill, then decode steps queued ahead.

One pass = one graph launch. The host writes the pass's metadata blob into a pinned staging
slot, patches the graph's ``stage_meta`` source pointer to that slot and launches; tokens come
back through a device-mapped ring the host reads without any copy call.

NOTE (slot lifetimes): staging slot k is reused only after the pass that last read it is known
to have run: decode steps are launched (one, or a group of decode_group in one graph) only while
fewer than lookahead steps are in flight, so at most lookahead - 1 + decode_group are, and there
are at least that many + 2 slots and ring entries. Prefill waits for its first token before
decoding starts.
"""
from __future__ import annotations

import os
import statistics
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Iterator

import numpy as np

from fixedgraph import nvtx
from fixedgraph._stepper import DecodeStager, RingWaiter, StepHistory
from fixedgraph.backends.base import write_rows
from fixedgraph.errors import ContextOverflow, EngineBusy, FixedGraphError
from fixedgraph.kvcache import BlockAllocator
from fixedgraph.models.dense import RING, STAGING, DenseDecoder
from fixedgraph.ops import sample as sample_ops
from fixedgraph.sampling import SamplingParams

# Decode steps queued ahead of the GPU. On the H200 (session 6 sweep, docs/BENCHMARKS.md) 2-4
# give the same ms/token and 1 does not (the GPU then waits on the host). The host time per step
# does not follow the depth: session 21's sweep found the slow mode (13-20 us, mostly inside
# cuGraphLaunch) at every depth, lookahead 1 with an empty queue included, and not in other
# generations of the same process.
LOOKAHEAD = 3
HOST_STEP_HISTORY = 4096  # decode steps whose host times the runner keeps (host_step_stats)
_SENTINEL = -1
_POLL_MIN_S = 1e-3  # the shortest wait before a token counts as late and the stream is queried
_POLL_MAX_S = 0.1  # the longest: a fault never goes unnoticed for longer
# Waiting for a token: spin on the ring (lowest latency, a whole core busy), or sleep through
# most of a wait expected to be long (a step of several hundred µs: big models, long contexts)
# and spin only for its end. FIXEDGRAPH_WAIT=spin|sleep; the steps queued ahead keep the GPU busy
# either way, so a late wake-up delays the token's delivery, never the GPU.
WAIT_MODE = os.environ.get("FIXEDGRAPH_WAIT", "spin")
_SLEEP_MIN_S = 300e-6  # a token expected further off than this is slept for
_SPIN_MARGIN_S = 150e-6  # wake this long before it is due (the OS wakes a sleeper up to ~60 µs late)


def sleep_before_token(now: float, last_token_t: float | None, interval_s: float,
                       min_s: float = _SLEEP_MIN_S, margin_s: float = _SPIN_MARGIN_S) -> float:
    """Seconds to sleep before spinning for the next token: until ``margin_s`` before it is due
    (the last token's time plus the token interval), when the interval is at least ``min_s``;
    0 when there is no cadence yet, the steps are short, or the token is due within the margin."""
    if last_token_t is None or interval_s < min_s:
        return 0.0
    return max(0.0, last_token_t + interval_s - margin_s - now)


@dataclass
class Graphs:
    decode: dict[tuple[int, int, bool], object]  # (width, context bucket, sampling) -> graph
    prefill: dict[tuple[int, bool], object]  # (chunk bucket, sampling) -> graph
    prefill_body: object  # a full chunk before the prompt's last: K/V only, no head (see _prefill)
    # (width, context bucket, sampling) -> a graph of Runner.decode_group steps (none when 1)
    decode_group: dict[tuple[int, int, bool], object]


class Runner:
    def __init__(self, device, model: DenseDecoder, arena, lookahead: int = LOOKAHEAD, decode_group: int = 1) -> None:
        self.device, self.model, self.arena = device, model, arena
        s = model.sizes
        self.num_slots = s.staging_slots
        # the deepest queue the ring and the staging slots allow (a later, deeper lookahead would
        # overwrite a slot or ring entry still in flight)
        self.max_lookahead = min(s.ring_len - 2, self.num_slots - 2)
        # Decode steps per graph launch: a group of k steps is one launch of a k-step graph (the
        # host's launch cost paid once per k tokens); the tail of a request, shorter than a
        # group, goes one step at a time. A group is launched while fewer than `lookahead` steps
        # are in flight, so up to lookahead - 1 + k are: the slots and ring must hold that many.
        if decode_group < 1:
            raise ValueError(f"decode_group must be at least 1 (decode steps per graph launch), got {decode_group}")
        if decode_group > self.max_lookahead:
            raise ValueError(f"decode_group {decode_group} exceeds the {self.max_lookahead} steps the staging slots "
                             f"and token ring hold in flight; boot with more staging slots")
        self.decode_group = int(decode_group)
        self.lookahead = max(1, min(lookahead, self.max_lookahead - self.decode_group + 1))
        self.slot_bytes = model.slot_bytes
        self.staging = device.alloc_host(self.num_slots * self.slot_bytes, mapped=True)
        arena.fill("stage_counter", 0)
        for name in arena.plan.regions:  # kernel scratch (e.g. split-K arrival counters) starts at zero
            if name.startswith("scratch."):
                arena.fill(name, 0)
        self.passes = 0  # passes launched == the device's stage_counter once they have run
        self.ring = device.alloc_host(s.ring_len * s.widths[-1] * 4, mapped=True)
        self.ring_i32 = self.ring.view(np.int32)
        self.ring_i32[:] = _SENTINEL
        self.alloc = BlockAllocator(s.num_blocks, s.block_size, s.max_blocks)
        self.checked = os.environ.get("FIXEDGRAPH_CHECKED", "0") == "1"  # see _launcher
        self.graphs = self._build_graphs()
        self._seen_words = -(-model.V // 32)
        self._next_seq = 0
        self._token_interval_s = 0.0  # moving average of the time between published tokens
        if WAIT_MODE not in ("spin", "sleep"):
            raise ValueError(f"FIXEDGRAPH_WAIT must be 'spin' or 'sleep', got {WAIT_MODE!r}")
        self.wait_mode = WAIT_MODE  # how _wait_token waits (see WAIT_MODE)
        self._last_token_t: float | None = None
        # Host time per decode step (preparing + launching, no waiting): totals since the last
        # reset and the last HOST_STEP_HISTORY steps' times (seconds), for their median (the mean
        # also carries the OS's interruptions of this thread); preallocated, no allocation a step.
        # Beside each step's wall time: the part spent in the launch call itself (cuGraphLaunch
        # on the GPU, which can block on the driver's queue; the rest is the loop's own work) and
        # the thread's CPU time for it (its thread clock: time blocked in the driver or preempted
        # is not in it; a spinning driver is). The "host CPU per step".
        self.host_step_hist = np.zeros(HOST_STEP_HISTORY)
        self.host_launch_hist = np.zeros(HOST_STEP_HISTORY)
        self.host_cpu_hist = np.zeros(HOST_STEP_HISTORY)
        self._history = StepHistory(self.host_step_hist, self.host_launch_hist, self.host_cpu_hist)
        # The per-step metadata writes of the decode loop, in C (runtime_pyx/stepper.pyx)
        layout = model.decode_meta[1]
        self._stager = DecodeStager(
            self.staging.array, self.slot_bytes, self.num_slots,
            {"positions": layout.offset("positions"), "slot": layout.offset("slot"),
             "seq_len": layout.offset("seq_len"), "step": layout.offset("step"),
             "counter": layout.offset("sample") + 4 * sample_ops.STEP_WORD},
            self.ring_i32[: s.ring_len], s.block_size, s.max_blocks, _SENTINEL)
        self._waiter = RingWaiter(self.ring_i32)  # _wait_token's spin, in C without the GIL
        # Held while a generation (or a teacher-forced pass) runs: the runner decodes one sequence
        # at a time through its staging slots and token ring, and a second one interleaved with
        # it (two streams iterated in turn, or two threads) would overwrite the first one's
        # metadata and tokens. See _claimed.
        self._busy = threading.Lock()
        # Profiling hook: called as hook(step, False) just before a decode step's graph is
        # enqueued and hook(step, True) just after (the profiler records CUDA events there, to
        # time the GPU's gaps between steps). None on the normal path: one test per step.
        self.step_hook = None

    def reset_host_stats(self) -> None:
        """Forget the host step times recorded so far (before a measured generation)."""
        self._history.reset()

    @property
    def host_steps(self) -> int:
        """Decode steps whose host time was recorded since the last reset."""
        return self._history.count

    @property
    def host_step_s(self) -> float:
        """Their host time in all (seconds)."""
        return self._history.step_total

    @property
    def host_cpu_s(self) -> float:
        """Their thread CPU time in all (seconds)."""
        return self._history.cpu_total

    def host_step_stats(self) -> dict:
        """Host µs spent preparing and launching one decode step since the last reset: mean over
        all of them; median, p90 and max over the last HOST_STEP_HISTORY; the launch call's share
        (launch_*) and the thread's CPU time for the same work (cpu_*: its thread clock, two
        reads a launch, ~0.2 µs each). Empty when none ran."""
        n = min(self.host_steps, HOST_STEP_HISTORY)
        if n == 0:
            return {}

        def med_p90(hist) -> tuple[float, float]:
            us = sorted(hist[i] * 1e6 for i in range(n))
            return statistics.median(us), us[min(n - 1, int(0.9 * n))]

        (med, p90), (l_med, l_p90), (c_med, c_p90) = map(med_p90, (self.host_step_hist, self.host_launch_hist,
                                                                 self.host_cpu_hist))
        return {"steps": self.host_steps, "mean_us": self.host_step_s / self.host_steps * 1e6,
                "median_us": med, "p90_us": p90, "max_us": max(self.host_step_hist[:n]) * 1e6,
                "launch_median_us": l_med, "launch_p90_us": l_p90,
                "cpu_mean_us": self.host_cpu_s / self.host_steps * 1e6, "cpu_median_us": c_med, "cpu_p90_us": c_p90}

    def _build_graphs(self) -> Graphs:
        host = {STAGING: self.staging, RING: self.ring}
        dec, pre = {}, {}
        for w in self.model.sizes.widths:
            for ctx in self.model.ctx_buckets:
                for sampling in (False, True):
                    bound = self.device.bind(self.model.decode_program(w, sampling, ctx), self.arena, host)
                    dec[(w, ctx, sampling)] = self.device.graph(bound)
        for t in self.model.sizes.chunk_buckets:
            for sampling in (False, True):
                bound = self.device.bind(self.model.prefill_program(t, sampling), self.arena, host)
                pre[(t, sampling)] = self.device.graph(bound)
        C = self.model.sizes.chunk_buckets[-1]
        body = self.device.graph(self.device.bind(self.model.prefill_program(C, False, head=False), self.arena, host))
        group = {}
        if self.decode_group > 1:
            for w in self.model.sizes.widths:
                for ctx in self.model.ctx_buckets:
                    for sampling in (False, True):
                        prog = self.model.decode_program(w, sampling, ctx, steps=self.decode_group)
                        group[(w, ctx, sampling)] = self.device.graph(self.device.bind(prog, self.arena, host))
        return Graphs(dec, pre, body, group)

    # ---- one pass ------------------------------------------------------------------------

    def _slot(self, k: int) -> tuple[np.ndarray, int]:
        off = (k % self.num_slots) * self.slot_bytes
        return self.staging.array[off : off + self.slot_bytes], self.staging.device_addr + off

    def _next_slot(self) -> np.ndarray:
        """The staging slot the next pass will read (its stage_meta_ring picks passes % slots)."""
        return self._slot(self.passes)[0]

    def resync(self) -> None:
        """Re-read the pass counter after passes launched outside the runner (profiling)."""
        self.device.synchronize()
        self.passes = int(self.arena.read("stage_counter")[0])

    def decode_graph(self, num_keys: int, sampling: bool = False, width: int = 1):
        """The decode graph a step with ``num_keys`` keys (position + 1) launches."""
        return self.graphs.decode[(width, self.model.ctx_bucket(num_keys), sampling)]

    def _launcher(self, graph):
        """What launches ``graph``: its replay, or with ``FIXEDGRAPH_CHECKED=1`` its program run
        eagerly with a synchronisation after every launch, so that a fault names its op (slow:
        for debugging only)."""
        if not self.checked:
            return graph.launch
        return lambda: self.device.run(graph.bound, checked=True)

    def _launch(self, graph) -> None:
        self._launcher(graph)()
        self.passes += 1

    def _decode_slot_views(self, k: int) -> dict:
        """Typed views of staging slot ``k`` laid out for a width-1 decode step."""
        v = self.model.decode_meta[1].views(self._slot(k)[0])
        return {"pos": v["positions"], "slot": v["slot"], "seq_len": v["seq_len"], "step": v["step"],
                "table": v["block_table"][0], "sample": v["sample"][0]}

    def _wait_token(self, step: int, row: int = 0, width: int = 1) -> int:
        """Wait until step ``step`` publishes row ``row``'s token in the mapped ring: spinning in
        C without the GIL (the application's other Python threads run meanwhile), after a nap in
        ``sleep`` mode. Only a token that is late (twice the recent interval between tokens, at
        least _POLL_MIN_S) makes the host ask the stream, without blocking (the steps queued
        behind keep the GPU busy), whether it still runs or has faulted; a stream that finished
        without the token is an error. Queries stay rare: each is a driver call, and the GPU may
        idle while it runs."""
        idx = (step % self.model.sizes.ring_len) * width + row
        t0 = time.perf_counter()
        if self.wait_mode == "sleep" and int(self.ring_i32[idx]) == _SENTINEL:
            nap = sleep_before_token(t0, self._last_token_t, self._token_interval_s)
            if nap > 0.0:
                time.sleep(nap)
        patience = min(_POLL_MAX_S, max(_POLL_MIN_S, 2.0 * self._token_interval_s))
        while True:
            tok = self._waiter.wait(idx, _SENTINEL, patience)
            if tok != _SENTINEL:
                now = time.perf_counter()
                if self._last_token_t is not None:  # moving average of the token cadence
                    self._token_interval_s += 0.1 * ((now - self._last_token_t) - self._token_interval_s)
                self._last_token_t = now
                return tok
            if self.device.idle():  # raises if the stream faulted
                tok = int(self.ring_i32[idx])
                if tok == _SENTINEL:
                    raise FixedGraphError(f"decode step {step} finished without publishing a token")
                return tok

    # ---- a sequence --------------------------------------------------------------------------

    @contextmanager
    def _claimed(self, what: str):
        """The runner held for one generation; EngineBusy when another holds it."""
        if not self._busy.acquire(blocking=False):
            raise EngineBusy(
                f"{what}: another generation is still running on this engine, which decodes one "
                "sequence at a time; iterate the earlier stream to its end or close() it first "
                "(LLM.generate takes several prompts and runs them in turn)")
        try:
            yield
        finally:
            self._busy.release()

    def check_prompt(self, num_tokens: int) -> None:
        limit = self.model.sizes.max_model_len
        if num_tokens < 1:
            raise ValueError("the prompt is empty: give at least one token")
        if num_tokens >= limit:
            raise ContextOverflow(f"prompt of {num_tokens} tokens leaves no room to generate within the "
                                  f"context of {limit} tokens; shorten the prompt or raise max_model_len")

    def generate(self, prompt: list[int], params: SamplingParams, seed: int,
                 max_new_tokens: int | None = None) -> Iterator[int]:
        """Yield generated token ids as the GPU publishes them. The caller stops iterating when
        the request finishes; steps already queued past that point are discarded. One at a time:
        a second generation started before this one ends raises EngineBusy."""
        with self._claimed("cannot start a generation"):
            yield from self._generate(prompt, params, seed, max_new_tokens)

    def _generate(self, prompt: list[int], params: SamplingParams, seed: int,
                  max_new_tokens: int | None) -> Iterator[int]:
        self.check_prompt(len(prompt))
        m, s = self.model, self.model.sizes
        seq = self._next_seq
        self._next_seq += 1
        self.alloc.allocate(seq, len(prompt))
        self._last_token_t = None  # the cadence is measured within a request (prefill excluded below)
        sampling = not params.is_greedy or params.repetition_penalty != 1.0
        try:
            if params.repetition_penalty != 1.0:
                self._set_seen(prompt)
            with nvtx.range("prefill"):
                first = self._prefill(seq, prompt, params, seed, sampling)
            yield first
            bucket_of = m.ctx_bucket
            n = len(prompt)
            launched = consumed = 0  # decode steps (step numbers start at 1)
            max_steps = s.max_model_len - n  # positions n .. max_model_len-1
            if max_new_tokens is not None:  # the prefill produced token 1; no step past the last
                max_steps = min(max_steps, max(0, max_new_tokens - 1))
            # Per-slot views, filled once per request; per step only the scalars change.
            slots = [self._decode_slot_views(k) for k in range(self.num_slots)]
            bucket = bucket_g = -1
            G = self.decode_group
            table = self.alloc.block_table(seq)
            sample_row = sample_ops.pack_params([params.device_row(0, seed)])[0] if sampling else None
            for v in slots:
                v["table"][: len(table)] = table
                if sampling:
                    v["sample"][:] = sample_row
            bs = s.block_size
            stager, history = self._stager, self._history
            stager.set_table(table)
            perf, cpu_clock = time.perf_counter, time.thread_time
            while True:
                while launched < max_steps and launched - consumed < self.lookahead:
                    t_host = perf()
                    c_host = cpu_clock()
                    # a group, or one step: the tail shorter than a group, and the steps up to a
                    # context-bucket boundary a group would straddle (every step then runs the
                    # bucket's graph a single step would, so the tokens never depend on the group)
                    first = launched + 1
                    k = G if (G > 1 and max_steps - launched >= G
                              and bucket_of(n + first) == bucket_of(n + first + G - 1)) else 1
                    last = n + first + k - 2  # the position of the launch's last step
                    if last >= len(table) * bs:  # a new block: every slot learns it
                        for b in self.alloc.ensure(seq, last + 1):
                            table.append(b)
                            stager.append_block(b)
                            for v in slots:
                                v["table"][len(table) - 1] = b
                    # each step's metadata into its own slot, its ring entry pending (in C)
                    stager.stage(self.passes, first, k, n, sampling)
                    if k == 1:
                        if last >= bucket:  # the sequence outgrew its context bucket: the next graph
                            bucket = bucket_of(last + 1)
                            launch = self._launcher(self.graphs.decode[(1, bucket, sampling)])
                        go = launch
                    else:
                        if last >= bucket_g:  # one bucket for the whole group: its last step's
                            bucket_g = bucket_of(last + 1)
                            launch_g = self._launcher(self.graphs.decode_group[(1, bucket_g, sampling)])
                        go = launch_g
                    hook = self.step_hook
                    if hook is None:
                        t_launch = perf()
                        go()
                    else:
                        hook(first, False)
                        t_launch = perf()
                        go()
                        hook(first, True)
                    t_end = perf()
                    history.record((t_end - t_host) / k, (t_end - t_launch) / k, (cpu_clock() - c_host) / k, k)
                    self.passes += k
                    launched += k
                if consumed == launched:
                    return
                consumed += 1
                yield self._wait_token(consumed)
        finally:
            self.device.synchronize()  # nothing queued may still write this sequence's blocks
            self.alloc.free(seq)

    def _prefill(self, seq: int, prompt: list[int], params: SamplingParams, seed: int, sampling: bool) -> int:
        m, s = self.model, self.model.sizes
        C = s.chunk_buckets[-1]
        table = self.alloc.block_table(seq)
        starts = list(range(0, len(prompt), C))
        for i, start in enumerate(starts):
            chunk = prompt[start : start + C]
            T = next(b for b in s.chunk_buckets if b >= len(chunk))
            layout = m.prefill_meta[T]
            if i and i % (self.num_slots - 1) == 0:
                self.device.synchronize()  # every staging slot is in flight: let them drain
            blob = self._next_slot()
            v = layout.views(blob)
            pos = np.arange(start, start + len(chunk), dtype=np.int64)
            v["tokens"][: len(chunk)] = chunk
            v["tokens"][len(chunk):] = 0
            v["positions"][: len(chunk)] = pos
            v["positions"][len(chunk):] = pos[-1]  # padding rows attend like the last real row
            blocks = np.asarray(table, dtype=np.int64)[pos // s.block_size]
            v["slot"][: len(chunk)] = blocks * s.block_size + pos % s.block_size
            v["slot"][len(chunk):] = -1  # padding rows write no KV
            v["seq_len"][:] = 0
            v["block_table"][0, : len(table)] = table
            v["last_row"][0] = len(chunk) - 1
            v["step"][0] = 0
            if sampling:
                v["sample"][0] = sample_ops.pack_params([params.device_row(0, seed)])[0]
            # Only the last chunk runs the head, which publishes the token to ring[0]: a chunk
            # before it, still in flight when the host resets ring[0] below, must publish nothing
            # there (it would hand back its own token while the last chunk runs, and decode would
            # rewrite the staging slots under it), and its logits would be thrown away anyway.
            if i == len(starts) - 1:
                self.ring_i32[0] = _SENTINEL
                self._launch(self.graphs.prefill[(T, sampling)])
            else:
                assert T == C, (T, C)  # chunks before the last are full
                self._launch(self.graphs.prefill_body)
        return self._wait_token(0)

    def _set_seen(self, prompt: list[int]) -> None:
        bits = np.zeros(self._seen_words, dtype=np.uint32)
        ids = np.unique(np.asarray(prompt, dtype=np.int64))
        np.bitwise_or.at(bits, ids // 32, (np.uint32(1) << (ids % 32).astype(np.uint32)))
        write_rows(self.arena, "seen", 0, bits[None, :])

    # ---- verification --------------------------------------------------------------------------

    def teacher_forced_logits(self, tokens: list[int], prompt_len: int, eager: bool = False) -> np.ndarray:
        """Logits after the prompt and after each later token of ``tokens`` fed in as the input
        (not the sampled token): ``[len(tokens) - prompt_len + 1, vocab]`` f32. With ``eager``
        the decode steps run the bound program launch by launch instead of the graph."""
        with self._claimed("cannot run a teacher-forced pass"):
            return self._teacher_forced_logits(tokens, prompt_len, eager)

    def _teacher_forced_logits(self, tokens: list[int], prompt_len: int, eager: bool) -> np.ndarray:
        m, s = self.model, self.model.sizes
        if len(tokens) > s.max_model_len:
            raise ContextOverflow(f"{len(tokens)} tokens exceed the context of {s.max_model_len}")
        seq = self._next_seq
        self._next_seq += 1
        self.alloc.allocate(seq, len(tokens))
        greedy = SamplingParams(temperature=0.0)
        out = []
        try:
            self._prefill(seq, tokens[:prompt_len], greedy, 0, False)
            self.device.synchronize()
            out.append(self.arena.read("logits")[0].copy())
            layout = m.decode_meta[1]
            eager_bound = None
            if eager:
                from fixedgraph.models.dense import RING, STAGING

                eager_bound = {c: self.device.bind(m.decode_program(1, False, c), self.arena,
                                                   {STAGING: self.staging, RING: self.ring}) for c in m.ctx_buckets}
            for step, pos in enumerate(range(prompt_len, len(tokens)), start=1):
                self.arena.write("tokens", np.array([tokens[pos]], dtype=np.int32))
                v = layout.views(self._next_slot())
                v["positions"][0] = pos
                v["slot"][0] = self.alloc.slot(seq, pos)
                v["seq_len"][0] = pos + 1
                table = self.alloc.block_table(seq)
                v["block_table"][0, : len(table)] = table
                v["step"][0] = step
                bucket = m.ctx_bucket(pos + 1)
                if eager_bound is not None:
                    self.device.run(eager_bound[bucket])
                    self.passes += 1
                else:
                    self._launch(self.graphs.decode[(1, bucket, False)])
                self.device.synchronize()
                out.append(self.arena.read("logits")[0].copy())
        finally:
            self.device.synchronize()
            self.alloc.free(seq)
        return np.stack(out)

"""Programmatic dependent launch (PDL): which kernels read, before their ``griddepcontrol.wait``,
data that other grids write, and the launch-order rule that keeps those reads sound.

ptx/src/pdl.cuh states the rule for the kernels. A kernel launched programmatically may start
while its predecessor runs; what it reads before its wait must already be written when it starts.
Each entry's PTX says when it signals ``launch_dependents`` (``Entry.signals_early``: at its
start, before its wait; otherwise right after the wait). From that, for every launch R, the ops
that have surely completed when R starts are those before an index ``settled(R)``:

- R has a full in-edge (the first op, after a copy, or R does not wait): everything before R;
- R's predecessor P signals late: R starts after every CTA of P passed its wait, so everything
  before P completed;
- P signals early: R starts as soon as every CTA of P started, so only what had completed when
  P started: ``settled(P)``.

``check_pdl_order`` refuses a program in which a grid that writes what a launch reads before its
wait (the staged metadata, or the K/V pool it reads) may still be running when that launch
starts, i.e. lies in ``[settled(R), R)``. It runs at bind time, on every backend.
"""

from __future__ import annotations

from fixedgraph.errors import LaunchConfigError
from fixedgraph.ops.attention import DECODE_ROPE_ENTRIES

# Entries that read before their wait data that other grids write: the fused decode attention
# reads the staged seq_len / block_table / slots and its layer's K/V pools (decode_tc in
# ptx/src/attention_decode.cuh).
PRE_WAIT_READERS = DECODE_ROPE_ENTRIES
STAGED_WRITERS = frozenset({"stage_meta", "stage_meta_ring", "stage_meta_ring_embed"})  # write the step's staged metadata
POOL_WRITERS = frozenset({*PRE_WAIT_READERS, "qk_norm_rope_kv"})  # write k_pool / v_pool (their args)
POOL_PARAMS = ("k_pool", "v_pool")


def _named(op, names_of) -> dict[str, object]:
    names = names_of(op.entry.name, len(op.values))
    if names is None:
        raise LaunchConfigError(f"kernel {op.entry.name}: no parameter names to check its PDL order with "
                                "(its numpy twin is missing or has another parameter count)")
    return dict(zip(names, op.values))


def check_pdl_order(program_name: str, ops: list, names_of=None) -> None:
    """Raise LaunchConfigError when a launch's pre-wait reads may race a grid still running (see
    the module doc). ``ops``: a bound program's ops (launches carry ``entry`` and ``values``)."""
    if names_of is None:
        from fixedgraph.backends.reference.twins import param_names as names_of
    settled: list[int] = []
    for i, op in enumerate(ops):
        entry = getattr(op, "entry", None)
        prev = ops[i - 1] if i else None
        prev_entry = getattr(prev, "entry", None)
        if entry is None or not entry.waits or prev_entry is None:
            settled.append(i)  # full in-edge (or a copy): everything before it completed
        elif prev_entry.signals_early:
            settled.append(settled[i - 1])
        else:
            settled.append(i - 1)
        if entry is None or entry.name not in PRE_WAIT_READERS:
            continue
        pools = {_named(op, names_of)[p] for p in POOL_PARAMS}
        for j in range(settled[i], i):
            other = ops[j]
            name = getattr(getattr(other, "entry", None), "name", None)
            clash = None
            if name in STAGED_WRITERS:
                clash = "the staged metadata"
            elif name in POOL_WRITERS and pools & {_named(other, names_of)[p] for p in POOL_PARAMS}:
                clash = "its K/V pool"
            if clash:
                raise LaunchConfigError(
                    f"program {program_name}: launch {i} ({entry.name}, {op.op.label or 'unlabelled'}) reads "
                    f"{clash} before its PDL wait, but launch {j} ({name}, {other.op.label or 'unlabelled'}), "
                    f"which writes it, may still run when it starts: every launch between them signals its "
                    f"dependents early. Put a late-signalling launch after launch {j} (see fixedgraph/pdl.py)")

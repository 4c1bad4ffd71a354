"""The Python API: ``LLM(model).generate(prompts, SamplingParams(...))`` and ``LLM.stream``."""
from __future__ import annotations

import os
import random
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Sequence

from fixedgraph import hostcpu, knobs, nvtx
from fixedgraph.backends import get_device
from fixedgraph.loader import load_weights
from fixedgraph.models.dense import DenseDecoder, Sizes
from fixedgraph.models.fixed import fixed_record
from fixedgraph.outputs import CompletionOutput, RequestMetrics
from fixedgraph.runner import LOOKAHEAD, Runner
from fixedgraph.sampling import SamplingParams, resolve_seed
from fixedgraph.stopping import StopChecker
from fixedgraph.tokenizer import Tokenizer
from fixedgraph.weights.source import open_weights, validate


@dataclass
class StreamChunk:
    text: str  # newly released text (may be empty while a stop string is undecided)
    token_id: int | None
    finish_reason: str | None
    output: CompletionOutput | None  # the whole completion, on the last chunk only


PREFILL_CHUNK_CUDA = 2048  # default tokens per prefill pass on a GPU (FIXEDGRAPH_PREFILL_CHUNK overrides)
PREFILL_CHUNK_REFERENCE = 256


def default_prefill_chunk(kind: str, max_len: int, env: str | None = None) -> int:
    """Tokens per prefill pass when the caller gives none: ``env`` (FIXEDGRAPH_PREFILL_CHUNK)
    if set, else 2048 on a GPU and 256 on the reference backend, never above the context
    rounded up to a power of two (a longer pass could never fill). A prefill pass launches
    (chunk x query heads per KV head / 64) x KV heads attention CTAs, each walking every key
    before it: 256-token passes gave Qwen3-0.6B 64 CTAs on a 132-SM GPU."""
    if env:
        try:
            chunk = int(env)
        except ValueError:
            raise ValueError(f"FIXEDGRAPH_PREFILL_CHUNK must be a power of two >= 16, got {env!r}") from None
    else:
        chunk = PREFILL_CHUNK_CUDA if kind == "cuda" else PREFILL_CHUNK_REFERENCE
    if chunk < 16 or chunk & (chunk - 1):
        raise ValueError(f"FIXEDGRAPH_PREFILL_CHUNK must be a power of two >= 16, got {chunk}")
    return min(chunk, max(16, 1 << max(0, int(max_len) - 1).bit_length()))


def ctx_buckets_from(arg, env: str | None) -> tuple[int, ...] | None:
    """The decode context buckets an engine builds graphs for: ``arg`` (a sequence of key
    counts, or a string "128,512,2048"), else the environment's FIXEDGRAPH_CTX_BUCKETS, else None
    (``Sizes``'s default). Each bucket is a set of decode graphs (more buckets: more graphs to
    instantiate at boot; fewer: the attention's split count fits fewer contexts); buckets at or
    past the context are dropped and the context itself is always the last."""
    raw = arg if arg is not None else env
    if raw is None or raw == "":
        return None
    parts = [p for p in raw.replace(" ", "").split(",") if p] if isinstance(raw, str) else list(raw)
    try:
        vals = [int(p) for p in parts]
    except (TypeError, ValueError):
        vals = []
    if not vals or any(v < 1 for v in vals) or vals != sorted(set(vals)):
        raise ValueError(f"ctx_buckets={raw!r}: give ascending, distinct positive key counts, e.g. "
                         f"'128,512,2048,4096,8192' (FIXEDGRAPH_CTX_BUCKETS takes the same)")
    return tuple(vals)


def _buckets(chunk: int) -> tuple[int, ...]:
    out, b = [], 16
    while b < chunk:
        out.append(b)
        b *= 2
    return tuple(out) + (chunk,)


class LLM:
    """A model booted into one fixed arena with its decode and prefill graphs built.

    ``model``: an HF model directory (safetensors + tokenizer.json) or a .gguf file; None loads
    the default model (SmolLM2-135M-Instruct, Q4_1 GGUF). ``backend``: "cuda", "reference" or
    "auto". Sizes are fixed at boot: ``max_model_len`` (prompt + output), ``block_size`` (KV
    tokens per block), ``num_blocks`` (default: enough for one full-length sequence),
    ``prefill_chunk`` (tokens per prefill pass, a power of two; default
    ``default_prefill_chunk``: 2048 on a GPU), ``lookahead`` (decode steps queued ahead;
    see ``runner.LOOKAHEAD``). ``cpu_affinity``: the CPUs of the calling thread, which runs the
    decode loop: "gpu" (those local to the GPU), "off" or a list such as "0-7" (default:
    ``FIXEDGRAPH_CPU_AFFINITY``, else "off"; see ``fixedgraph.hostcpu``).
    ``decode_group``: decode steps per graph launch (default ``FIXEDGRAPH_DECODE_GROUP``, else 4):
    the host prepares that many steps' metadata and launches one graph holding them all, so its
    launch cost is paid once per group and the steps inside it overlap through PDL; a request's
    last steps go one at a time, and tokens still arrive one per step. 1 keeps one graph per step
    (half the graphs to instantiate at boot).
    ``ctx_buckets``: the decode graphs' context buckets in keys (default
    ``FIXEDGRAPH_CTX_BUCKETS``, else 128, 512, 2048, 4096, 6144, 8192; the context is always the last):
    each fixes the attention's split count for the contexts up to it (``ctx_buckets_from``).
    ``weights``: instead of a path, a ``(WeightSource, ModelConfig)`` pair (prompts are then
    token ids).
    """

    def __init__(self, model: str | Path | None = None, *, weights=None, backend: str | None = None,
                 max_model_len: int | None = None, block_size: int = 16, num_blocks: int | None = None,
                 prefill_chunk: int | None = None, lookahead: int = LOOKAHEAD, progress: bool | None = None,
                 seed: int | None = None, cpu_affinity: str | None = None, decode_group: int | None = None,
                 ctx_buckets: Sequence[int] | str | None = None) -> None:
        t0 = time.perf_counter()
        stray = knobs.unknown()
        if stray:  # a misspelt knob would otherwise change nothing, silently
            warnings.warn(knobs.describe_unknown(stray), stacklevel=2)
        if int(lookahead) < 1:
            raise ValueError(f"lookahead must be at least 1 (decode steps queued ahead of the GPU), got {lookahead}")
        group = int(decode_group if decode_group is not None else os.environ.get("FIXEDGRAPH_DECODE_GROUP", "4"))
        if group < 1:
            raise ValueError(f"decode_group must be at least 1 (decode steps per graph launch), got {group}")
        buckets = ctx_buckets_from(ctx_buckets, os.environ.get("FIXEDGRAPH_CTX_BUCKETS"))
        if weights is not None:  # (WeightSource, ModelConfig) built by the caller; ids-only prompts
            source, cfg = weights
            validate(source, cfg)
            self.model_path = Path(getattr(source, "path", "<weights>"))
        else:
            if model is None:
                from fixedgraph.models.default import default_model_path

                model = default_model_path()
            self.model_path = Path(model)
            source, cfg = open_weights(self.model_path)
        try:
            self.tokenizer = None if weights is not None else self._tokenizer(self.model_path)
            self.device = get_device(backend)
            props = self.device.properties()
            self.host_cpus = hostcpu.bind_thread(
                cpu_affinity if cpu_affinity is not None else os.environ.get("FIXEDGRAPH_CPU_AFFINITY", "off"),
                props.get("pci_bus_id"))
            default_len = 4096 if self.device.kind == "cuda" else 1024
            max_len = min(cfg.max_position_embeddings, max_model_len or default_len)
            if prefill_chunk is None:
                prefill_chunk = default_prefill_chunk(self.device.kind, max_len,
                                                      os.environ.get("FIXEDGRAPH_PREFILL_CHUNK"))
            if prefill_chunk < 16 or prefill_chunk & (prefill_chunk - 1):
                raise ValueError(f"prefill_chunk must be a power of two >= 16, got {prefill_chunk}")
            self.prefill_chunk = prefill_chunk
            max_blocks = -(-max_len // block_size)
            sizes = Sizes(widths=(1,), chunk_buckets=_buckets(prefill_chunk), block_size=block_size,
                          num_blocks=num_blocks or max_blocks + 1, max_model_len=max_len,
                          ring_len=max(16, 2 * (lookahead + group) + 2),
                          staging_slots=max(6, lookahead + group + 2),
                          # the attention's split plans fill this GPU's SMs (the reference
                          # backend keeps the H200's 132, so its programs match a GPU's)
                          **({"num_sms": int(props["sm_count"])}
                             if self.device.kind == "cuda" else {}),
                          **({"ctx_buckets": buckets} if buckets else {}))
            self.config = cfg
            self.model = DenseDecoder(cfg, sizes)
            self.plan = self.model.plan()
            self.arena = self.device.arena(self.plan)
            with nvtx.range("load weights"):
                self.weight_bytes = load_weights(self.model, source, self.arena, progress)
        finally:
            source.close()
        with nvtx.range("build graphs"):
            self.runner = Runner(self.device, self.model, self.arena, lookahead, group)
        self.fixed = fixed_record(self.model, self.arena, self.runner.ring.device_addr)
        self.boot_s = time.perf_counter() - t0
        self._rng = random.Random(seed)

    def close(self) -> None:
        """Release the arena and pinned buffers now (they are otherwise held until exit)."""
        if getattr(self, "arena", None) is not None:
            self.device.synchronize()
            self.runner = None
            self.device.free(self.arena.base)
            self.arena = None

    def __enter__(self) -> "LLM":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @staticmethod
    def _tokenizer(path: Path) -> Tokenizer | None:
        if not path.is_dir():
            return Tokenizer.from_gguf(path)
        if not (path / "tokenizer.json").exists():
            return None  # a weights-only checkpoint: prompts must be token ids
        return Tokenizer.from_hf_dir(path)

    # ---- prompts -----------------------------------------------------------------------------

    def encode(self, prompt: str | list[int] | list[dict], chat: bool = False) -> list[int]:
        if isinstance(prompt, list) and (not prompt or isinstance(prompt[0], int)):
            return list(prompt)
        if self.tokenizer is None:
            raise ValueError(f"{self.model_path} has no tokenizer.json: pass prompts as lists of token ids")
        if isinstance(prompt, list) or chat:
            messages = prompt if isinstance(prompt, list) else [{"role": "user", "content": prompt}]
            text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
            return self.tokenizer.encode(text, add_special_tokens=False)
        return self.tokenizer.encode(prompt)

    # ---- generation --------------------------------------------------------------------------

    def stream(self, prompt: str | list[int] | list[dict], params: SamplingParams | None = None,
               chat: bool = False) -> Iterator[StreamChunk]:
        """Generate for one prompt, yielding text as soon as it is safe to show."""
        params = params or SamplingParams()
        arrival = time.perf_counter()
        ids = self.encode(prompt, chat)
        self.runner.check_prompt(len(ids))
        seed = resolve_seed(params, self._rng)
        eos = self.tokenizer.eos_token_ids if self.tokenizer else self.config.eos_token_ids
        stop = StopChecker(params, eos, prompt_len=len(ids), max_model_len=self.model.sizes.max_model_len)
        detok = self.tokenizer.incremental(skip_special_tokens=params.skip_special_tokens) if self.tokenizer else None
        tokens: list[int] = []
        text: list[str] = []
        first = None
        gen = self.runner.generate(ids, params, seed, stop.max_new_tokens)
        try:
            for tok in gen:
                if first is None:
                    first = time.perf_counter()
                tokens.append(tok)
                released, reason = stop.update(tok, detok.feed(tok) if detok else "")
                if reason is not None:
                    text.append(released)
                    out = self._output(ids, tokens, "".join(text), reason, arrival, first)
                    yield StreamChunk(released, tok, reason, out)
                    return
                if released:
                    text.append(released)
                yield StreamChunk(released, tok, None, None)
        finally:
            gen.close()
        tail = stop.flush()
        text.append(tail)
        yield StreamChunk(tail, None, "length", self._output(ids, tokens, "".join(text), "length", arrival,
                                                            first or time.perf_counter()))

    def _output(self, ids, tokens, text, reason, arrival, first) -> CompletionOutput:
        metrics = RequestMetrics.from_times(len(ids), len(tokens), arrival, first, time.perf_counter())
        return CompletionOutput(text=text, token_ids=list(tokens), finish_reason=reason,
                                prompt_token_ids=list(ids), metrics=metrics)

    def generate(self, prompts: str | Sequence[str | list[int] | list[dict]],
                 params: SamplingParams | None = None, chat: bool = False) -> list[CompletionOutput]:
        """Generate for each prompt; returns one CompletionOutput per prompt, in order."""
        if isinstance(prompts, str):
            prompts = [prompts]
        outputs = []
        for prompt in prompts:
            last = None
            for chunk in self.stream(prompt, params, chat):
                last = chunk
            outputs.append(last.output)
        return outputs

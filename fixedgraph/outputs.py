"""What a finished (or streaming) request hands back: its text, tokens and timings."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class RequestMetrics:
    """Timings of one request, in seconds.

    `prefill_s`: prompt processing up to the first token. `decode_s`: first token to the last.
    `ttft_s`: arrival to the first token (queueing included). `tpot_s`: mean time per output
    token after the first. `tokens_per_s`: decode rate, 1 / tpot_s (0 when undefined).
    """

    prompt_tokens: int
    generated_tokens: int
    prefill_s: float
    decode_s: float
    ttft_s: float
    tpot_s: float
    tokens_per_s: float

    @classmethod
    def from_times(
        cls,
        prompt_tokens: int,
        generated_tokens: int,
        arrival_s: float,
        first_token_s: float,
        finish_s: float,
        prefill_start_s: float | None = None,
    ) -> RequestMetrics:
        """Build metrics from `time.perf_counter()` stamps.

        `prefill_start_s` is when the request left the queue (defaults to `arrival_s`).
        The stamps must be in order: arrival <= prefill start <= first token <= finish.
        """
        if prefill_start_s is None:
            prefill_start_s = arrival_s
        if not arrival_s <= prefill_start_s <= first_token_s <= finish_s:
            raise ValueError(
                f"request times out of order: arrival {arrival_s}, prefill start "
                f"{prefill_start_s}, first token {first_token_s}, finish {finish_s}")
        decode_s = finish_s - first_token_s
        # The first token comes out of prefill; only the later ones are paced by decode steps.
        num_decoded = generated_tokens - 1
        tpot_s = decode_s / num_decoded if num_decoded > 0 else 0.0
        return cls(
            prompt_tokens=prompt_tokens,
            generated_tokens=generated_tokens,
            prefill_s=first_token_s - prefill_start_s,
            decode_s=decode_s,
            ttft_s=first_token_s - arrival_s,
            tpot_s=tpot_s,
            tokens_per_s=1.0 / tpot_s if tpot_s > 0 else 0.0,
        )

    def summary(self) -> str:
        """One line for logs and the CLI."""
        return (f"{self.prompt_tokens} prompt + {self.generated_tokens} generated tokens | "
                f"prefill {self.prefill_s * 1e3:.1f} ms | ttft {self.ttft_s * 1e3:.1f} ms | "
                f"tpot {self.tpot_s * 1e3:.2f} ms | {self.tokens_per_s:.1f} tok/s")

    def __repr__(self) -> str:
        return f"RequestMetrics({self.summary()})"


@dataclass(slots=True)
class CompletionOutput:
    """The result of one request. `finish_reason` is "stop", "length", or None while running."""

    text: str
    token_ids: list[int]
    finish_reason: str | None
    prompt_token_ids: list[int] = field(default_factory=list)
    metrics: RequestMetrics | None = None

    def summary(self) -> str:
        """One line: finish reason, token counts and the start of the text."""
        text = self.text if len(self.text) <= 40 else self.text[:40] + "…"
        return (f"finish={self.finish_reason} prompt={len(self.prompt_token_ids)} "
                f"generated={len(self.token_ids)} text={text!r}")

    def __repr__(self) -> str:
        return f"CompletionOutput({self.summary()})"

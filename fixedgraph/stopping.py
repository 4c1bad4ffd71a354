"""Deciding, token by token, when a request finishes and which text is safe to stream.

Order of checks per token (as in vLLM): nothing stops before `min_tokens` tokens; then EOS
(unless ignore_eos), then a stop token id, then a stop string, then length. A stop wins over
length on the same token.

Stop strings are matched on the decoded text. Text that might still be the start of a stop
string is held back until the next tokens decide it, so a stream never shows part of a stop
string that the final output removes.
"""
from __future__ import annotations

from collections.abc import Callable, Iterable

from fixedgraph.sampling import SamplingParams

FINISH_STOP = "stop"
FINISH_LENGTH = "length"


class StopChecker:
    """Stop and streaming state of one request.

    `eos_token_ids` is one id, several, or None. `detokenizer_text_fn(token_id) -> str` gives a
    token's new text when `update` is called without one. The context limit is
    `max_model_len` tokens including the `prompt_len` prompt tokens; None means no limit here.
    """

    def __init__(
        self,
        params: SamplingParams,
        eos_token_ids: int | Iterable[int] | None,
        detokenizer_text_fn: Callable[[int], str] | None = None,
        *,
        prompt_len: int = 0,
        max_model_len: int | None = None,
    ):
        self.params = params
        if eos_token_ids is None:
            eos_token_ids = ()
        elif isinstance(eos_token_ids, int):
            eos_token_ids = (eos_token_ids,)
        self._eos = frozenset(() if params.ignore_eos else eos_token_ids)
        self._stop_ids = frozenset(params.stop_token_ids or ())
        self._stops: list[str] = list(params.stop or ())
        # Every proper prefix of a stop string: a text tail in this set may still become a stop.
        self._prefixes = frozenset(s[:i] for s in self._stops for i in range(1, len(s)))
        self._max_hold = max((len(s) - 1 for s in self._stops), default=0)
        self._text_fn = detokenizer_text_fn

        limits = []
        if params.max_tokens is not None:
            limits.append(params.max_tokens)
        if max_model_len is not None:
            limits.append(max_model_len - prompt_len)
        self.max_new_tokens: int | None = min(limits) if limits else None

        self._pending = ""  # decoded but not yet released text
        self.num_generated = 0
        self.finish_reason: str | None = None
        self.stop_reason: int | str | None = None  # the token id or string that stopped it

    @property
    def is_finished(self) -> bool:
        return self.finish_reason is not None

    def update(self, token_id: int, new_text: str | None = None) -> tuple[str, str | None]:
        """Account for one generated token whose decoded text is `new_text`.

        Returns (text safe to stream now, finish reason or None). Once a reason is returned the
        text returned so far is the whole output; later calls raise RuntimeError.
        """
        if self.finish_reason is not None:
            raise RuntimeError(f"update() after the request finished ({self.finish_reason!r})")
        if new_text is None:
            new_text = self._text_fn(token_id) if self._text_fn is not None else ""
        self.num_generated += 1
        old_len = len(self._pending)
        buf = self._pending + new_text
        self._pending = ""
        params = self.params

        if self.num_generated >= params.min_tokens:
            if token_id in self._eos or token_id in self._stop_ids:
                # The stop token's own text (usually "" or a special token) is dropped unless asked.
                self.stop_reason = token_id
                return self._finish(buf if params.include_stop_str_in_output
                                    else buf[:old_len], FINISH_STOP)
            match = self._find_stop(buf, old_len)
            if match is not None:
                start, stop = match
                self.stop_reason = stop
                end = start + len(stop) if params.include_stop_str_in_output else start
                return self._finish(buf[:end], FINISH_STOP)

        if self.max_new_tokens is not None and self.num_generated >= self.max_new_tokens:
            return self._finish(buf, FINISH_LENGTH)

        hold = self._hold_length(buf)
        self._pending = buf[len(buf) - hold:] if hold else ""
        return buf[:len(buf) - hold], None

    def flush(self) -> str:
        """Release held-back text; call when generation ends for a reason outside this checker."""
        text, self._pending = self._pending, ""
        return text

    def _finish(self, text: str, reason: str) -> tuple[str, str]:
        self.finish_reason = reason
        return text, reason

    def _find_stop(self, buf: str, old_len: int) -> tuple[int, str] | None:
        """The first stop string to complete in `buf` within its new text (after `old_len`).

        Matches ending in the held text were already rejected (or fell before min_tokens), so
        only matches ending in the new text count. Earliest end wins, as if the text had been
        read one character at a time; on a tie the longer string wins (it hides more).
        """
        best: tuple[int, int, str] | None = None  # (end, -len, stop)
        for stop in self._stops:
            start = buf.find(stop, max(0, old_len - len(stop) + 1))
            if start < 0:
                continue
            key = (start + len(stop), -len(stop), stop)
            if best is None or key < best:
                best = key
        if best is None:
            return None
        end, neg_len, stop = best
        return end + neg_len, stop

    def _hold_length(self, buf: str) -> int:
        """Length of the longest tail of `buf` that is a proper prefix of some stop string."""
        for n in range(min(self._max_hold, len(buf)), 0, -1):
            if buf[-n:] in self._prefixes:
                return n
        return 0

"""StopChecker: finish reasons, min_tokens, and incremental stop-string matching with hold-back."""
from __future__ import annotations

import random

import pytest

from fixedgraph.sampling import SamplingParams
from fixedgraph.stopping import StopChecker

EOS = 2


def run(checker: StopChecker, pieces) -> tuple[list[str], str | None]:
    """Feed (token_id, text) pieces until a finish; returns (chunks streamed, reason)."""
    chunks = []
    for token_id, text in pieces:
        chunk, reason = checker.update(token_id, text)
        chunks.append(chunk)
        if reason is not None:
            return chunks, reason
    chunks.append(checker.flush())
    return chunks, None


def text_pieces(*texts: str) -> list[tuple[int, str]]:
    return [(100 + i, t) for i, t in enumerate(texts)]


def final(params: SamplingParams, pieces, **kw) -> tuple[str, str | None]:
    chunks, reason = run(StopChecker(params, EOS, **kw), pieces)
    return "".join(chunks), reason


def reference(params: SamplingParams, pieces, eos=(EOS,), max_new=None) -> tuple[str, str | None]:
    """Independent model: read the text one character at a time, checking every stop."""
    text = ""
    for n, (token_id, piece) in enumerate(pieces, start=1):
        old = text
        text += piece
        if n >= params.min_tokens:
            if (token_id in eos and not params.ignore_eos) or token_id in params.stop_token_ids:
                return (text if params.include_stop_str_in_output else old), "stop"
            for end in range(len(old) + 1, len(text) + 1):
                hits = [s for s in params.stop if text[:end].endswith(s)]
                if hits:
                    s = max(hits, key=len)
                    keep = end if params.include_stop_str_in_output else end - len(s)
                    return text[:keep], "stop"
        limit = min(x for x in (params.max_tokens, max_new, 10**9) if x is not None)
        if n >= limit:
            return text, "length"
    return text, None


def test_stop_string_split_across_tokens():
    params = SamplingParams(stop=["</s>"], max_tokens=None)
    checker = StopChecker(params, EOS)
    assert checker.update(10, "Hello") == ("Hello", None)
    assert checker.update(11, " <") == (" ", None)      # "<" may start "</s>": held
    assert checker.update(12, "/") == ("", None)
    assert checker.update(13, "s>tail") == ("", "stop")
    assert checker.stop_reason == "</s>" and checker.is_finished
    with pytest.raises(RuntimeError):
        checker.update(14, "x")


def test_false_start_is_released():
    checker = StopChecker(SamplingParams(stop=["</s>"]), EOS)
    assert checker.update(10, "a <") == ("a ", None)
    assert checker.update(11, "/") == ("", None)
    assert checker.update(12, "b") == ("</b", None)  # no longer a stop prefix
    assert checker.flush() == ""


def test_stop_string_at_the_very_start():
    assert final(SamplingParams(stop="STOP"), text_pieces("STOP", "more")) == ("", "stop")
    assert final(SamplingParams(stop="STOP"), text_pieces("ST", "OP")) == ("", "stop")
    params = SamplingParams(stop="STOP", include_stop_str_in_output=True)
    assert final(params, text_pieces("STOPx")) == ("STOP", "stop")


def test_overlapping_candidates():
    # "bc" completes before "abcd" could: the earliest end wins.
    params = SamplingParams(stop=["abcd", "bc"])
    assert final(params, text_pieces("a", "b", "c", "d")) == ("a", "stop")
    # Both end on the same character: the longer one wins.
    assert final(SamplingParams(stop=["bc", "abc"]), text_pieces("xab", "c")) == ("x", "stop")
    # A self-overlapping stop: "aaab" matches at offset 1.
    checker = StopChecker(SamplingParams(stop=["aab"]), EOS)
    assert checker.update(1, "a") == ("", None)
    assert checker.update(1, "a") == ("", None)
    assert checker.update(1, "a") == ("a", None)
    assert checker.update(1, "b") == ("", "stop")
    # A stop that is a prefix of another stops as soon as it completes.
    assert final(SamplingParams(stop=["ab", "abc"]), text_pieces("a", "b", "c")) == ("", "stop")


def test_unicode():
    params = SamplingParams(stop=["👋🏽", "。"])
    checker = StopChecker(params, EOS)
    assert checker.update(10, "héllo 👋") == ("héllo ", None)
    assert checker.update(11, "🏽 bye") == ("", "stop")
    assert checker.stop_reason == "👋🏽"
    assert final(params, text_pieces("日本語", "です。", "次")) \
        == ("日本語です", "stop")
    params = SamplingParams(stop=["👋🏽"], include_stop_str_in_output=True)
    assert final(params, text_pieces("a👋", "🏽b")) == ("a👋🏽", "stop")
    assert final(params, text_pieces("a👋", "👋b")) == ("a👋👋b", None)


def test_include_stop_str_in_output():
    params = SamplingParams(stop=["</s>"], include_stop_str_in_output=True)
    assert final(params, text_pieces("ab</", "s>cd")) == ("ab</s>", "stop")
    params = SamplingParams(stop_token_ids=[7], include_stop_str_in_output=True)
    assert final(params, [(5, "x"), (7, "<end>")]) == ("x<end>", "stop")


def test_eos_and_stop_token_ids():
    checker = StopChecker(SamplingParams(stop=["!!"]), [EOS, 3])
    assert checker.update(10, "hi!") == ("hi", None)
    # EOS ends the request: its own text is dropped, the held text is released.
    assert checker.update(3, "<eos>") == ("!", "stop")
    assert checker.stop_reason == 3
    params = SamplingParams(stop_token_ids=[9], ignore_eos=True)
    assert final(params, [(10, "a"), (EOS, "<eos>"), (9, "<x>"), (10, "b")]) == ("a<eos>", "stop")


def test_ignore_eos():
    params = SamplingParams(ignore_eos=True, max_tokens=3)
    assert final(params, [(EOS, ""), (EOS, ""), (EOS, "z")]) == ("z", "length")
    assert final(SamplingParams(max_tokens=3), [(EOS, "q")]) == ("", "stop")


def test_min_tokens():
    params = SamplingParams(min_tokens=3, stop=["x"], stop_token_ids=[9])
    checker = StopChecker(params, EOS)
    assert checker.update(EOS, "") == ("", None)
    assert checker.update(9, "x") == ("x", None)      # neither stop counts before token 3
    assert checker.update(EOS, "") == ("", "stop")    # token 3 may stop
    # A stop string completed before min_tokens is not matched later.
    params = SamplingParams(min_tokens=2, stop=["ab", "abc"])
    assert final(params, text_pieces("ab", "x")) == ("abx", None)
    assert final(params, text_pieces("a", "b")) == ("", "stop")


def test_length_and_context_limit():
    params = SamplingParams(max_tokens=2, stop=["xyz"])
    assert final(params, text_pieces("a", "bxy", "z")) == ("abxy", "length")  # held text released
    params = SamplingParams(max_tokens=None)
    assert final(params, text_pieces("a", "b", "c", "d"), prompt_len=6, max_model_len=9) \
        == ("abc", "length")
    params = SamplingParams(max_tokens=2, stop=["b"])
    assert final(params, text_pieces("a", "b")) == ("a", "stop")  # stop wins on the same token


def test_flush_and_detokenizer_fn():
    vocab = {1: "<", 2: "/", 3: "s"}
    checker = StopChecker(SamplingParams(stop=["</s>"], max_tokens=None), None, vocab.__getitem__)
    assert checker.update(1) == ("", None)
    assert checker.update(2) == ("", None)
    assert checker.update(3) == ("", None)
    assert checker.flush() == "</s"
    assert checker.flush() == ""


@pytest.mark.parametrize("seed", range(8))
def test_random_streams_match_reference(seed):
    rng = random.Random(seed)
    alphabet = "ab é👋"
    for _ in range(300):
        stops = ["".join(rng.choice(alphabet) for _ in range(rng.randint(1, 4)))
                 for _ in range(rng.randint(0, 3))]
        params = SamplingParams(
            stop=stops, stop_token_ids=rng.choice([[], [7]]), ignore_eos=rng.random() < 0.3,
            include_stop_str_in_output=rng.random() < 0.5, min_tokens=rng.randint(0, 4),
            max_tokens=rng.choice([None, 20, 30]))
        pieces = [(rng.choice([EOS, 7] + [10] * 30),
                   "".join(rng.choice(alphabet) for _ in range(rng.choice([0, 1, 1, 2, 3]))))
                  for _ in range(40)]
        max_model_len = rng.choice([None, 25])
        max_new = None if max_model_len is None else max_model_len - 3
        expected = reference(params, pieces, max_new=max_new)
        checker = StopChecker(params, EOS, prompt_len=3, max_model_len=max_model_len)
        full, streamed = "", ""
        reason = None
        for token_id, piece in pieces:
            full += piece
            chunk, reason = checker.update(token_id, piece)
            streamed += chunk
            # Streaming never retracts: what was sent is a prefix of the final text.
            assert expected[0].startswith(streamed), (stops, pieces, streamed, expected)
            if reason is not None:
                break
            # Only a possible stop start is held back, nothing more.
            held = full[len(streamed):]
            assert full.startswith(streamed)
            assert held == "" or any(s.startswith(held) and s != held for s in params.stop)
        if reason is None:
            streamed += checker.flush()
        assert (streamed, reason) == expected, (stops, pieces)

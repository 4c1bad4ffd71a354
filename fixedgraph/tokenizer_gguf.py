"""Rebuild a `tokenizers.Tokenizer` from GGUF tokenizer metadata (llama.cpp's `tokenizer.ggml.*`).

Two vocabulary kinds are supported:
- "gpt2": byte-level BPE from tokens + merges; the split regex follows `tokenizer.ggml.pre`.
- "llama": SentencePiece BPE from tokens + scores (merges derived from the scores), byte fallback.
"""
from __future__ import annotations

from functools import lru_cache
from typing import Any

from tokenizers import AddedToken, Regex, decoders, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer
from tokenizers.models import BPE

from fixedgraph.errors import UnsupportedModel

# llama.cpp token types (llama_token_type).
TOKEN_NORMAL, TOKEN_UNKNOWN, TOKEN_CONTROL, TOKEN_USER_DEFINED, TOKEN_UNUSED, TOKEN_BYTE = 1, 2, 3, 4, 5, 6

# Split regexes of the byte-level families, as their tokenizer.json files (and llama.cpp) define them.
_LLAMA3_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_SPLIT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
_SPLITS = {"llama-bpe": _LLAMA3_SPLIT, "llama3": _LLAMA3_SPLIT, "llama-v3": _LLAMA3_SPLIT,
           "smaug-bpe": _LLAMA3_SPLIT, "qwen2": _QWEN2_SPLIT, "deepseek-r1-qwen": _QWEN2_SPLIT}
# Pre-tokenizers that split every digit before GPT-2's regex (SmolLM's tokenizer.json does this).
_DIGIT_SPLIT_PRES = ("smollm", "starcoder", "refact")


def build_gguf_tokenizer(reader: Any) -> HFTokenizer:
    """The tokenizer a GGUF file describes; UnsupportedModel for other vocabulary kinds."""
    from fixedgraph.weights.gguf_source import gguf_value

    kind = gguf_value(reader, "tokenizer.ggml.model")
    tokens: list[str] = gguf_value(reader, "tokenizer.ggml.tokens")
    if tokens is None:
        raise UnsupportedModel("the GGUF file has no tokenizer.ggml.tokens; it carries no tokenizer")
    types: list[int] = gguf_value(reader, "tokenizer.ggml.token_type") or [TOKEN_NORMAL] * len(tokens)
    if kind == "gpt2":
        tok = _byte_level(tokens, gguf_value(reader, "tokenizer.ggml.merges") or [],
                          gguf_value(reader, "tokenizer.ggml.pre") or "default")
        add_bos_default = False
    elif kind == "llama":
        scores = gguf_value(reader, "tokenizer.ggml.scores")
        add_prefix = gguf_value(reader, "tokenizer.ggml.add_space_prefix")
        tok = _sentencepiece(tokens, scores, True if add_prefix is None else bool(add_prefix))
        add_bos_default = True  # llama.cpp adds BOS to SentencePiece vocabularies unless told not to
    else:
        raise UnsupportedModel(
            f"GGUF tokenizer model {kind!r} is not supported; supported: 'gpt2' (byte-level BPE), "
            f"'llama' (SentencePiece BPE)")
    _add_special_tokens(tok, tokens, types, byte_level=kind == "gpt2")
    add_bos = gguf_value(reader, "tokenizer.ggml.add_bos_token")
    add_eos = gguf_value(reader, "tokenizer.ggml.add_eos_token")
    _set_post_processor(tok, tokens,
                        gguf_value(reader, "tokenizer.ggml.bos_token_id") if
                        (add_bos_default if add_bos is None else add_bos) else None,
                        gguf_value(reader, "tokenizer.ggml.eos_token_id") if add_eos else None)
    return tok


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character table: printable Latin-1 bytes map to themselves,
    the rest (controls, space, ...) to U+0100 upwards in byte order."""
    keep = [*range(ord("!"), ord("~") + 1), *range(0xA1, 0xAC + 1), *range(0xAE, 0xFF + 1)]
    table = {b: chr(b) for b in keep}
    shifted = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + shifted)
            shifted += 1
    return table


def _byte_level(tokens: list[str], merges: list[str], pre: str) -> HFTokenizer:
    spelling = bytes_to_unicode()
    alphabet = set(spelling.values())
    # Tokens already spelled in the byte alphabet stay; any other (a mislabelled added token with a
    # raw space, say) is respelled so the vocabulary and merges agree.
    vocab = {(t if set(t) <= alphabet else "".join(spelling[b] for b in t.encode("utf-8"))): i
             for i, t in enumerate(tokens)}
    pairs = [tuple(m.split(" ", 1)) for m in merges]
    tok = HFTokenizer(BPE(vocab=vocab, merges=pairs, fuse_unk=False, byte_fallback=False))
    split = _SPLITS.get(pre)
    if split is not None:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(split), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    elif pre in _DIGIT_SPLIT_PRES:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    else:  # "default", "gpt2", ...: GPT-2's own regex inside ByteLevel
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return tok


def _sentencepiece(tokens: list[str], scores: list[float] | None, add_prefix: bool) -> HFTokenizer:
    if scores is None:
        raise UnsupportedModel("a SentencePiece GGUF vocabulary needs tokenizer.ggml.scores")
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = HFTokenizer(BPE(vocab=vocab, merges=_merges_from_scores(tokens, scores),
                          fuse_unk=True, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(
        replacement="\u2581", prepend_scheme="first" if add_prefix else "never", split=False)
    steps = [decoders.Replace("\u2581", " "), decoders.ByteFallback(), decoders.Fuse()]
    if add_prefix:
        steps.append(decoders.Strip(content=" ", left=1, right=0))
    tok.decoder = decoders.Sequence(steps)
    return tok


def _merges_from_scores(tokens: list[str], scores: list[float]) -> list[tuple[str, str]]:
    """SentencePiece BPE merges implied by the vocabulary: a token of score s is reachable by
    merging any split of it into two vocabulary tokens, and higher-scored tokens merge first."""
    vocab = {t: i for i, t in enumerate(tokens)}
    found: list[tuple[float, int, int, int, int, int, str, str]] = []
    for index, (token, score) in enumerate(zip(tokens, scores)):
        for cut in range(1, len(token)):
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                # Ties: longer pieces first, then vocabulary order (deterministic, as HF orders).
                found.append((-score, -len(left), -len(right), index, vocab[left], vocab[right],
                              left, right))
    found.sort()
    return [(f[6], f[7]) for f in found]


def _add_special_tokens(tok: HFTokenizer, tokens: list[str], types: list[int], byte_level: bool) -> None:
    alphabet = set(bytes_to_unicode().values()) if byte_level else None
    special, user = [], []
    for token, kind in zip(tokens, types):
        if kind in (TOKEN_CONTROL, TOKEN_UNKNOWN) and not (alphabet is not None and not set(token) <= alphabet):
            special.append(AddedToken(token, special=True, normalized=False))
        elif kind == TOKEN_USER_DEFINED:
            # llama.cpp always matches user-defined tokens whole (e.g. "<think>").
            user.append(AddedToken(token, special=False, normalized=False))
    if special:
        tok.add_special_tokens(special)
    if user:
        tok.add_tokens(user)


def _set_post_processor(tok: HFTokenizer, tokens: list[str], bos: int | None, eos: int | None) -> None:
    if bos is None and eos is None:
        return
    prefix = f"{tokens[bos]}:0 " if bos is not None else ""
    suffix = f" {tokens[eos]}:0" if eos is not None else ""
    pair_suffix = f" {tokens[eos]}:1" if eos is not None else ""
    used = {i for i in (bos, eos) if i is not None}
    tok.post_processor = processors.TemplateProcessing(
        single=f"{prefix}$A:0{suffix}",
        pair=f"{prefix}$A:0{suffix} {prefix.replace(':0', ':1')}$B:1{pair_suffix}",
        special_tokens=[(tokens[i], i) for i in sorted(used)])

"""Tokenizer: a `tokenizers.Tokenizer` plus chat template and special ids, from an HF dir or a GGUF.

GGUF files carry only vocabulary, merges/scores and token types; `tokenizer_gguf.py` rebuilds an
equivalent `tokenizers` pipeline from them.
"""
from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer as HFTokenizer

from fixedgraph.errors import FixedGraphError, WeightFileError


class Tokenizer:
    """Text <-> token ids for one model, with its chat template and special token ids."""

    def __init__(self, backend: HFTokenizer, *, chat_template: str | None,
                 bos_token_id: int | None, eos_token_ids: tuple[int, ...]) -> None:
        self.backend = backend
        self.chat_template = chat_template
        self.bos_token_id = bos_token_id
        self.eos_token_ids = tuple(eos_token_ids)

    @property
    def vocab_size(self) -> int:
        """Number of ids the tokenizer can produce, added tokens included."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    @classmethod
    def from_hf_dir(cls, path: str | Path) -> Tokenizer:
        """Load tokenizer.json, with tokenizer_config.json's chat template and special tokens."""
        path = Path(path)
        tok_file = path / "tokenizer.json"
        if not tok_file.is_file():
            raise WeightFileError(f"{tok_file} not found; download the model's tokenizer.json")
        try:
            backend = HFTokenizer.from_file(str(tok_file))
        except Exception as e:
            raise WeightFileError(f"{tok_file} cannot be parsed ({e}); re-download it") from e
        config = _read_json(path / "tokenizer_config.json")
        template = config.get("chat_template")
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            named = {t["name"]: t["template"] for t in template}
            template = named.get("default", next(iter(named.values()), None))
        if template is None and (path / "chat_template.jinja").is_file():
            template = (path / "chat_template.jinja").read_text()
        bos = _token_id(backend, config.get("bos_token"))
        eos = [_token_id(backend, config.get("eos_token"))]
        gen = _read_json(path / "generation_config.json")
        gen_eos = gen.get("eos_token_id")
        eos += gen_eos if isinstance(gen_eos, list) else [gen_eos]
        return cls(backend, chat_template=template, bos_token_id=bos,
                   eos_token_ids=tuple(dict.fromkeys(int(t) for t in eos if t is not None)))

    @classmethod
    def from_gguf(cls, path_or_reader: Any) -> Tokenizer:
        """Rebuild the tokenizer a GGUF file describes (byte-level BPE or SentencePiece BPE)."""
        from fixedgraph.tokenizer_gguf import build_gguf_tokenizer
        from fixedgraph.weights.gguf_source import gguf_reader, gguf_value

        reader = gguf_reader(path_or_reader)
        backend = build_gguf_tokenizer(reader)
        eos = [gguf_value(reader, "tokenizer.ggml.eos_token_id"),
               gguf_value(reader, "tokenizer.ggml.eot_token_id")]
        return cls(backend, chat_template=gguf_value(reader, "tokenizer.chat_template"),
                   bos_token_id=gguf_value(reader, "tokenizer.ggml.bos_token_id"),
                   eos_token_ids=tuple(dict.fromkeys(int(t) for t in eos if t is not None)))

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        """Token ids of `text`; add_special_tokens adds BOS/EOS where the model's pipeline does."""
        return self.backend.encode(text, add_special_tokens=add_special_tokens).ids

    def decode(self, ids: list[int], skip_special_tokens: bool = True) -> str:
        """Text of `ids`."""
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def token_text(self, token_id: int) -> str | None:
        """The vocabulary string of one id (byte-level spelling), or None if out of range."""
        return self.backend.id_to_token(token_id)

    def apply_chat_template(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True,
                            **kwargs: Any) -> str:
        """Render `messages` with the model's Jinja chat template, sandboxed as HF does."""
        if not self.chat_template:
            raise FixedGraphError(
                "this model has no chat template (tokenizer_config.json / GGUF tokenizer.chat_template); "
                "pass a raw prompt instead, or use an instruct/chat checkpoint")
        template = _compile_template(self.chat_template)
        bos = self.token_text(self.bos_token_id) if self.bos_token_id is not None else ""
        eos = self.token_text(self.eos_token_ids[0]) if self.eos_token_ids else ""
        return template.render(messages=messages, add_generation_prompt=add_generation_prompt,
                               bos_token=bos, eos_token=eos, **kwargs)

    def incremental(self, skip_special_tokens: bool = True) -> IncrementalDetokenizer:
        """A fresh streaming detokenizer over this tokenizer."""
        return IncrementalDetokenizer(self, skip_special_tokens)


class IncrementalDetokenizer:
    """Feed ids one at a time; get back only newly completed text.

    Decodes a short window (the last emitted tokens + the pending ones) rather than the whole
    sequence, and holds text back while it ends in U+FFFD, i.e. mid UTF-8 character. The window
    starts at a token boundary already emitted so decoder quirks (SentencePiece's leading-space
    strip) apply equally to the window's prefix and its extension and cancel out.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        self.ids: list[int] = []
        self._prefix_offset = 0  # start of the decode window
        self._read_offset = 0  # ids before this are already emitted

    def feed(self, token_id: int) -> str:
        """Add one id; return the text it completes ('' while a character is incomplete)."""
        self.ids.append(int(token_id))
        decode = self.tokenizer.decode
        prefix = decode(self.ids[self._prefix_offset:self._read_offset], self.skip_special_tokens)
        full = decode(self.ids[self._prefix_offset:], self.skip_special_tokens)
        if len(full) <= len(prefix) or full.endswith("\ufffd"):
            return ""
        self._prefix_offset, self._read_offset = self._read_offset, len(self.ids)
        return full[len(prefix):]

    def flush(self) -> str:
        """Text still held back at the end of the stream (e.g. an invalid trailing byte)."""
        decode = self.tokenizer.decode
        prefix = decode(self.ids[self._prefix_offset:self._read_offset], self.skip_special_tokens)
        full = decode(self.ids[self._prefix_offset:], self.skip_special_tokens)
        self._prefix_offset = self._read_offset = len(self.ids)
        return full[len(prefix):]


_TEMPLATE_CACHE: dict[str, Any] = {}


def _compile_template(source: str) -> Any:
    """Compile once with HF's environment: sandboxed, trim/lstrip blocks, loop controls."""
    if source in _TEMPLATE_CACHE:
        return _TEMPLATE_CACHE[source]
    try:
        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as e:  # pragma: no cover - jinja2 is a runtime dependency
        raise FixedGraphError("chat templates need jinja2: pip install jinja2") from e

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
               separators: Any = None, sort_keys: bool = False) -> str:
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    try:
        compiled = env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise FixedGraphError(f"the model's chat template does not parse: {e}") from e
    _TEMPLATE_CACHE[source] = compiled
    return compiled


def _token_id(backend: HFTokenizer, token: Any) -> int | None:
    if isinstance(token, dict):  # {"content": "<s>", ...} in older tokenizer_config.json
        token = token.get("content")
    return None if token is None else backend.token_to_id(token)


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise WeightFileError(f"{path} is not valid JSON ({e}); re-download it") from e

"""Read kernel parameter lists from PTX text, and find the committed PTX modules.

The runtime packs kernel arguments from what the PTX itself declares (type, size, alignment,
offset of every ``.param``), so the .cu source, the PTX and the packer cannot disagree.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from fixedgraph.errors import PtxError

# .param types: kind letter, bits
_SCALAR = re.compile(r"^\.(?P<kind>[usfb])(?P<bits>8|16|32|64)$")
_ENTRY = re.compile(r"\.entry\s+(?P<name>[A-Za-z_$][\w$]*)\s*\((?P<params>[^)]*)\)", re.S)
_PARAM = re.compile(
    r"^\.param\s+(?:\.align\s+(?P<align0>\d+)\s+)?(?P<type>\.[usfb](?:8|16|32|64))(?P<ptr>\s+\.ptr(?:\s+\.\w+)*)?"
    r"(?:\s+\.align\s+(?P<align>\d+))?\s+(?P<name>[\w$]+)(?:\[(?P<count>\d+)\])?$"
)


@dataclass(frozen=True, slots=True)
class Param:
    name: str
    kind: str  # "u" unsigned, "s" signed, "f" float, "b" untyped bits
    bits: int  # element width
    count: int  # elements (1 for a scalar; >1 for a .b8 byte array, e.g. a struct by value)
    align: int
    offset: int  # bytes from the start of the parameter buffer
    is_ptr: bool  # declared `.ptr` (or a .u64 the packer accepts addresses for)

    @property
    def size(self) -> int:
        return self.bits // 8 * self.count


@dataclass(frozen=True, slots=True)
class Entry:
    name: str
    params: tuple[Param, ...]
    waits: bool = False  # body executes griddepcontrol.wait: safe to launch programmatically
    # griddepcontrol.launch_dependents comes before griddepcontrol.wait in the body: the entry
    # lets its successor launch at its start, not after its wait (fixedgraph/pdl.py)
    signals_early: bool = False

    @property
    def param_bytes(self) -> int:
        if not self.params:
            return 0
        last = self.params[-1]
        return last.offset + last.size


def parse_params(entry: str, text: str) -> tuple[Param, ...]:
    params: list[Param] = []
    offset = 0
    for i, raw in enumerate(p.strip() for p in text.split(",")):
        if not raw:
            if text.strip():
                raise PtxError(f"entry {entry}: empty parameter #{i} in its .param list")
            continue
        m = _PARAM.match(" ".join(raw.split()))
        if not m:
            raise PtxError(f"entry {entry}: cannot parse parameter #{i}: {raw!r}")
        sm = _SCALAR.match(m["type"])
        assert sm is not None
        bits = int(sm["bits"])
        count = int(m["count"]) if m["count"] else 1
        # `.ptr .align N` is a hint about the pointee; the parameter aligns to its own size.
        natural = bits // 8
        declared = m["align0"] or (m["align"] if not m["ptr"] else None)
        align = int(declared) if declared else natural
        if align <= 0 or align & (align - 1):
            raise PtxError(f"entry {entry}: parameter {m['name']} has alignment {align}, not a power of two")
        offset = (offset + align - 1) // align * align
        params.append(Param(m["name"], sm["kind"], bits, count, align, offset, bool(m["ptr"])))
        offset += natural * count
    return tuple(params)


def parse_ptx(text: str, source: str = "<ptx>") -> dict[str, Entry]:
    """Every ``.entry`` of a PTX module with its parameter list. Raises PtxError on garbage."""
    if not re.search(r"^\s*\.version\s+\d+\.\d+", text, re.M):
        raise PtxError(f"{source}: not PTX (no .version directive)")
    if not re.search(r"^\s*\.target\s+\w+", text, re.M):
        raise PtxError(f"{source}: not PTX (no .target directive)")
    entries: dict[str, Entry] = {}
    matches = list(_ENTRY.finditer(text))
    for k, m in enumerate(matches):
        name = m["name"]
        if name in entries:
            raise PtxError(f"{source}: entry {name} is defined twice")
        body = text[m.end() : matches[k + 1].start() if k + 1 < len(matches) else len(text)]
        wait = body.find("griddepcontrol.wait")
        trigger = body.find("griddepcontrol.launch_dependents")
        entries[name] = Entry(name, parse_params(name, m["params"]), wait >= 0,
                              trigger >= 0 and (wait < 0 or trigger < wait))
    if ".entry" in text and not entries:
        raise PtxError(f"{source}: has .entry directives but none could be parsed")
    return entries


def ptx_dirs() -> list[Path]:
    """Where committed PTX lives: inside an installed package, or the repo's ptx/ (editable).
    ``FIXEDGRAPH_PTX_DIR`` comes first when set (e.g. the timeline-traced modules of
    ``tools/build_ptx.py --trace DIR``); read once, on the first lookup."""
    here = Path(__file__).resolve().parent
    first = [Path(os.environ["FIXEDGRAPH_PTX_DIR"])] if os.environ.get("FIXEDGRAPH_PTX_DIR") else []
    return [d for d in (*first, here / "ptx", here.parent / "ptx") if d.is_dir()]


@lru_cache(maxsize=None)
def module_paths() -> dict[str, Path]:
    """Module name -> PTX file; the first directory that holds a module wins."""
    found: dict[str, Path] = {}
    for d in ptx_dirs():
        for p in sorted(d.glob("*.ptx")):
            found.setdefault(p.stem, p)
    return found


@lru_cache(maxsize=None)
def entry_index() -> dict[str, tuple[str, Entry]]:
    """Entry name -> (module name, Entry) over every committed module."""
    index: dict[str, tuple[str, Entry]] = {}
    for mod, path in module_paths().items():
        for name, entry in parse_ptx(path.read_text(), str(path)).items():
            if name in index:
                raise PtxError(f"kernel entry {name} is defined in both {index[name][0]}.ptx and {mod}.ptx")
            index[name] = (mod, entry)
    return index


def find_entry(name: str) -> tuple[str, Entry]:
    try:
        return entry_index()[name]
    except KeyError:
        known = ", ".join(sorted(entry_index())) or "none"
        raise PtxError(f"no PTX entry named {name!r}; known entries: {known}") from None

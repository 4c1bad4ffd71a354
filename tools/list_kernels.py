#!/usr/bin/env python3
"""List every kernel entry: module, parameters (source names from the twins, types and offsets
from the PTX), whether it waits for its predecessor (PDL), and its launcher's first doc line.

    python tools/list_kernels.py [--markdown]
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import pkgutil
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fixedgraph.ops as ops_pkg  # noqa: E402
from fixedgraph.backends.reference.twins import param_names  # noqa: E402
from fixedgraph.ptx import entry_index  # noqa: E402


def launchers() -> dict[str, str]:
    """Entry name -> the first docstring line of the launcher that emits it (best effort)."""
    found: dict[str, str] = {}
    for info in pkgutil.iter_modules(ops_pkg.__path__):
        mod = importlib.import_module(f"fixedgraph.ops.{info.name}")
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if fn.__module__ != mod.__name__ or not fn.__doc__ or name.startswith("_"):
                continue
            src = inspect.getsource(fn)
            # f-strings that build entry names (a literal head of 8+ characters; each {...} any
            # name characters), e.g. f"paged_attention_decode_rope{st}_d{D}"
            patterns = [re.compile(re.sub(r"\\{[^}]*\\}", "[a-z0-9_]*", re.escape(body)) + "$")
                        for body in re.findall(r'f"([a-z_0-9]{8,}[^"]*)"', src)]
            for entry in entry_index():
                if (f'"{entry}"' in src or f"'{entry}'" in src
                        or any(p.match(entry) for p in patterns)):
                    found.setdefault(entry, f"ops.{info.name}.{name}: {fn.__doc__.strip().splitlines()[0]}")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    docs = launchers()
    index = entry_index()
    for name in sorted(index, key=lambda n: (index[n][0], n)):
        module, entry = index[name]
        names = param_names(name, len(entry.params)) or [p.name for p in entry.params]
        params = ", ".join(f"{n}: .{p.kind}{p.bits}@{p.offset}" for n, p in zip(names, entry.params))
        line = f"{module}.ptx  {name}({params})  pdl={'early' if entry.signals_early else 'yes' if entry.waits else 'no'}"
        if args.markdown:
            print(f"- `{name}` ({module}.ptx{', PDL early' if entry.signals_early else ', PDL' if entry.waits else ''}): `{', '.join(names)}`"
                  + (f" — {docs[name]}" if name in docs else ""))
        else:
            print(line + (f"\n    {docs[name]}" if name in docs else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())

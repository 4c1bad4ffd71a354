#!/usr/bin/env python3
"""Where a kernel's warps wait: Nsight Compute's per-instruction stall samples, ranked.

    python tools/ncu_stalls.py REPORT.ncu-rep|SOURCE.csv ... [--top 12] [--json out.json]

Input: an ``ncu`` report collected with ``--section WarpStateStats --section SourceCounters``
(``ncu -i`` exports its SASS page), or that page already exported with ``ncu -i REPORT --page
source --csv --print-source sass``. For every kernel in it: the total warp-stall samples, the
instructions holding the most samples with their dominant stall reason and the load that wrote
a register each reads (a stalled instruction is usually the first *use* of a load's result, so
the load is the one to look at), the samples between consecutive barriers / fences / waits
(which phase of the kernel the time goes to), and, where the page has the SourceCounters'
per-instruction execution counts, how much of the entry's code the launch ran at all (what the
SM's instruction caches must hold for it: session 15 measured cold code at 150-300 ns per KB),
and, where the page has the SourceCounters' memory columns, which instructions move more L2
sectors (global) or shared-memory wavefronts than their addresses need (session 36: the decode
attention's ignore-src K/V copies, 24 sectors a warp against an ideal 16).
This is how the serial block-table loads of decode attention were found (docs/BENCHMARKS.md,
session 7); `tools/gpu_check.sh ncu` runs it on the decode kernels.
"""
from __future__ import annotations

import argparse
import csv
import io
import json
import re
import subprocess
import sys
from pathlib import Path

SAMPLES = "Warp Stall Sampling (All Samples)"
# SASS opcodes that end a phase (a barrier, fence, async-copy wait, atomic or exit)
PHASE_OPS = ("BAR.SYNC", "ERRBAR", "MEMBAR", "DEPBAR", "LDGDEPBAR", "ATOM", "RED", "EXIT", "ACQBULK",
             "SYNCS")
# SASS opcodes whose result a later instruction may wait for (global, shared, local memory)
MEMORY_OPS = ("LDG", "LDS", "LDL", "LD.", "ATOM")  # prefixes: LDSM, ATOMG, ATOMS, .. included
_REG = re.compile(r"\bR(\d+)\b")
# the per-instruction warp-level execution count of the SourceCounters section (not the thread-
# level or predicated-on counts): which instructions ran at all, so how much code a launch touched
_EXECUTED = re.compile(r"(Warp )?Instructions Executed|inst_executed", re.IGNORECASE)
# SourceCounters' per-instruction memory columns: (what, actual column, ideal column)
EXCESS = (("L2 sectors (global)", "L2 Theoretical Sectors Global", "L2 Theoretical Sectors Global Ideal"),
          ("shared wavefronts", "L1 Wavefronts Shared", "L1 Wavefronts Shared Ideal"))
SASS_BYTES = 16  # one sm_90 instruction


def parse_source_csv(text: str) -> list[dict]:
    """Kernels of an exported SASS source page: [{"kernel", "rows": [{"index", "sass", "samples",
    "stalls": {reason: samples}}]}]. A kernel block starts at a "Kernel Name" line, followed by
    its header line and one line per instruction."""
    kernels: list[dict] = []
    header: list[str] | None = None
    for rec in csv.reader(io.StringIO(text)):
        if not rec:
            continue
        if rec[0] == "Kernel Name":
            kernels.append({"kernel": rec[1] if len(rec) > 1 else "?", "rows": []})
            header = None
            continue
        if rec[0] == "Address" and SAMPLES in rec:
            header = rec
            if not kernels:  # a page exported for one kernel may lack the name line
                kernels.append({"kernel": "?", "rows": []})
            continue
        if header is None or len(rec) < len(header):
            continue
        row = dict(zip(header, rec))
        stalls = {k[len("stall_"):]: _num(v) for k, v in row.items()
                  if k.startswith("stall_") and "(Not Issued)" not in k and _num(v)}
        executed = next((_num(v) for k, v in row.items() if _EXECUTED.fullmatch(k.strip())), None)
        memory = {what: (_num(row[a]), _num(row[i])) for what, a, i in EXCESS if a in row and i in row}
        kernels[-1]["rows"].append({"index": len(kernels[-1]["rows"]), "sass": row.get("Source", "").strip(),
                                    "samples": _num(row[SAMPLES]), "stalls": stalls, "executed": executed,
                                    "memory": memory})
    return kernels


def _num(v: str) -> int:
    try:
        return int(float(v.replace(",", "")))
    except (ValueError, AttributeError):
        return 0


def _opcode(sass: str) -> str:
    """The opcode of a SASS line, without its guard predicate (``@P0``, ``@!PT``)."""
    parts = sass.split()
    if parts and parts[0].startswith("@"):
        parts = parts[1:]
    return parts[0] if parts else ""


def _operands(sass: str) -> tuple[set[int], set[int]]:
    """(registers written, registers read) of a SASS line, roughly: the first operand is the
    destination (none when it is a memory address, as in stores and LDGSTS), widened by the
    opcode's .64 / .128 width; the rest are sources."""
    parts = sass.split(None, 2 if sass.startswith("@") else 1)  # [guard], opcode, operands
    op, args = _opcode(sass), [a.strip() for a in parts[-1].split(",")] if len(parts) > 1 else []
    if not args or args[0] == op:
        return set(), set()
    width = 4 if ".128" in op else 2 if ".64" in op else 1
    dst = set() if args[0].startswith("[") else {int(m) + k for m in _REG.findall(args[0]) for k in range(width)}
    return dst, {int(m) for a in args[1:] for m in _REG.findall(a)}


def producer_of(rows: list[dict], i: int, reach: int = 400) -> dict | None:
    """The memory instruction before row i that wrote a register row i reads (None: not found
    within ``reach`` instructions)."""
    _, src = _operands(rows[i]["sass"])
    for j in range(i - 1, max(-1, i - reach), -1):
        dst, _ = _operands(rows[j]["sass"])
        hit = dst & src
        if not hit:
            continue
        if _opcode(rows[j]["sass"]).startswith(MEMORY_OPS):
            return {"index": j, "sass": rows[j]["sass"]}
        src -= hit  # that register came from arithmetic: follow the others
        if not src:
            return None
    return None


def summarize(kernel: dict, top: int = 12) -> dict:
    rows = kernel["rows"]
    total = sum(r["samples"] for r in rows)
    ranked = sorted(rows, key=lambda r: -r["samples"])[:top]
    hot = []
    for r in sorted(ranked, key=lambda r: r["index"]):
        if not r["samples"]:
            continue
        producer = producer_of(rows, r["index"])
        reason = max(r["stalls"], key=r["stalls"].get) if r["stalls"] else ""
        hot.append({"index": r["index"], "samples": r["samples"], "share": r["samples"] / total if total else 0.0,
                    "reason": reason, "sass": r["sass"], "after": producer})
    phases, start, acc = [], 0, 0
    for r in rows:
        acc += r["samples"]
        if _opcode(r["sass"]).startswith(PHASE_OPS):
            phases.append({"first": start, "last": r["index"], "samples": acc, "ends_at": r["sass"]})
            start, acc = r["index"] + 1, 0
    if acc:
        phases.append({"first": start, "last": len(rows) - 1, "samples": acc, "ends_at": "(end)"})
    counted = [r for r in rows if r.get("executed") is not None]
    touched = sum(1 for r in counted if r["executed"] > 0) if counted else None
    return {"kernel": kernel["kernel"], "instructions": len(rows), "samples": total, "hot": hot,
            "phases": phases, "touched": touched, "excess": excess(rows)}


def excess(rows: list[dict], top: int = 3) -> list[dict]:
    """Per memory column of EXCESS present on the page: the kernel's actual and ideal totals and
    the instructions with the most beyond their ideal (actual / ideal per execution)."""
    out = []
    for what, _, _ in EXCESS:
        have = [r for r in rows if what in r.get("memory", {})]
        if not have:
            continue
        actual = sum(r["memory"][what][0] for r in have)
        ideal = sum(r["memory"][what][1] for r in have)
        worst = sorted((r for r in have if r["memory"][what][0] > r["memory"][what][1]),
                       key=lambda r: r["memory"][what][1] - r["memory"][what][0])
        n_over = len(worst)
        out.append({"what": what, "actual": actual, "ideal": ideal, "instructions_over": n_over,
                    "worst": [{"index": r["index"], "sass": r["sass"], "actual": r["memory"][what][0],
                               "ideal": r["memory"][what][1], "executed": r.get("executed")}
                              for r in worst[:top]]})
    return out


def export_csv(report: Path) -> str:
    """The SASS source page of an ncu report, as CSV (needs ncu on PATH)."""
    r = subprocess.run(["ncu", "-i", str(report), "--page", "source", "--csv", "--print-source", "sass"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise SystemExit(f"ncu -i {report} failed ({r.returncode}): {r.stderr.strip()[:400]}")
    return r.stdout


def render(s: dict, min_phase_share: float = 0.02) -> str:
    lines = [f"{s['kernel']}: {s['samples']} stall samples over {s['instructions']} SASS instructions"]
    if s.get("touched") is not None:  # the instruction caches hold what ran, not the whole entry
        lines.append(f"  code touched: {s['touched']} of {s['instructions']} instructions executed at least once, "
                     f"{s['touched'] * SASS_BYTES / 1024:.1f} of {s['instructions'] * SASS_BYTES / 1024:.1f} KB")
    lines.append(f"  {'#':>5} {'samples':>7} {'share':>6}  {'reason':<16} instruction   [the load it waits for]")
    for h in s["hot"]:
        after = f"   [{h['after']['index']}: {h['after']['sass'][:48]}]" if h["after"] else ""
        lines.append(f"  {h['index']:>5} {h['samples']:>7} {h['share']:>6.1%}  {h['reason']:<16} {h['sass'][:56]}{after}")
    for e in s.get("excess", []):
        if e["actual"] <= e["ideal"]:
            lines.append(f"  {e['what']}: {e['actual']} at their ideal")
            continue
        lines.append(f"  {e['what']}: {e['actual']} against an ideal {e['ideal']} "
                     f"({(e['actual'] - e['ideal']) / e['actual']:.1%} excess) from {e['instructions_over']} instructions, most:")
        for w in e["worst"]:
            per = f"{w['actual'] / w['executed']:.1f} / {w['ideal'] / w['executed']:.1f} an execution" if w["executed"] else \
                f"{w['actual']} / {w['ideal']}"
            lines.append(f"  {w['index']:>5} {per:<24} {w['sass'][:60]}")
    lines.append("  phases (samples between barriers, fences, waits, atomics; >= 2% shown):")
    for p in s["phases"]:
        if s["samples"] and p["samples"] / s["samples"] >= min_phase_share:
            lines.append(f"  {p['first']:>5}-{p['last']:<5} {p['samples']:>7} {p['samples'] / s['samples']:>6.1%}  "
                         f"until {p['ends_at'][:60]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("inputs", nargs="+", type=Path, help=".ncu-rep reports or exported SASS source CSVs")
    ap.add_argument("--top", type=int, default=12, help="instructions listed per kernel")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    out = []
    for path in args.inputs:
        if not path.exists():
            print(f"ncu_stalls: {path} does not exist", file=sys.stderr)
            return 2
        text = export_csv(path) if path.suffix == ".ncu-rep" else path.read_text(errors="replace")
        kernels = parse_source_csv(text)
        if not kernels or not any(k["rows"] for k in kernels):
            print(f"ncu_stalls: no per-instruction samples in {path} (collect with --section SourceCounters "
                  f"--section WarpStateStats; export with --page source --csv --print-source sass)", file=sys.stderr)
            return 2
        for k in kernels:
            s = summarize(k, args.top)
            s["input"] = str(path)
            out.append(s)
            print(render(s))
            print()
    if args.json:
        args.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

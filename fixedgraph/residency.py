"""Which CTAs can share an SM: the register and shared-memory arithmetic of co-residency.

With programmatic dependent launch a kernel's CTAs start while its predecessor's are still
resident, so where they land depends on what fits *beside* the predecessor's CTAs, not on the
kernel's own occupancy. Session 35 measured how much that matters: the same attention code at
183 registers ran Qwen3-0.6B 6.5% a token slower than at 230 (docs/BENCHMARKS.md), because at
183 one of its CTAs fits beside two of norm + qkv's (80 registers x 256 threads) and at 230 none
does. Host only: footprints come from ``ptxas -v`` on the committed PTX (what the driver's JIT
allocates for the same PTX and arch), the launch shapes from a Program.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SmLimits:
    """One SM's budget (defaults: sm_90, the H100 / H200; CUDA occupancy tables for cc 9.0)."""

    regs: int = 65536
    reg_unit: int = 256  # registers are allocated per warp in units of this many
    max_threads: int = 2048
    max_ctas: int = 32
    smem: int = 233472  # shared memory at the largest carveout (228 KiB)
    smem_unit: int = 128  # allocation granularity
    smem_reserved: int = 1024  # the system's shared memory per resident CTA


@dataclass(frozen=True)
class Footprint:
    """What one CTA of a launch holds on its SM."""

    regs: int  # registers per thread (ptxas)
    threads: int
    smem: int  # static + dynamic shared memory bytes

    def reg_bytes(self, sm: SmLimits) -> int:
        warps = -(-self.threads // 32)
        per_warp = -(-self.regs * 32 // sm.reg_unit) * sm.reg_unit
        return warps * per_warp

    def smem_bytes(self, sm: SmLimits) -> int:
        return -(-(self.smem + sm.smem_reserved) // sm.smem_unit) * sm.smem_unit


def fit_beside(new: Footprint, residents: list[tuple[Footprint, int]], sm: SmLimits = SmLimits()) -> int:
    """How many CTAs of ``new`` can start on an SM that holds ``count`` CTAs of each resident
    footprint (0 when the residents alone overfill it)."""
    regs = sm.regs - sum(f.reg_bytes(sm) * n for f, n in residents)
    smem = sm.smem - sum(f.smem_bytes(sm) * n for f, n in residents)
    threads = sm.max_threads - sum(f.threads * n for f, n in residents)
    ctas = sm.max_ctas - sum(n for _, n in residents)
    if min(regs, smem, threads, ctas) < 0:
        return 0
    return max(0, min(regs // new.reg_bytes(sm), smem // new.smem_bytes(sm), threads // new.threads, ctas))


_COMPILING = re.compile(r"Compiling entry function '(?P<name>[\w$]+)'")
_USED = re.compile(r"Used (?P<regs>\d+) registers(?:, used \d+ barriers)?(?:, (?P<smem>\d+) bytes smem)?")


def parse_ptxas_verbose(text: str) -> dict[str, tuple[int, int]]:
    """``ptxas -v`` output -> {entry: (registers per thread, static shared bytes)}."""
    out: dict[str, tuple[int, int]] = {}
    current = None
    for line in text.splitlines():
        m = _COMPILING.search(line)
        if m:
            current = m.group("name")
            continue
        m = _USED.search(line)
        if m and current is not None:
            out[current] = (int(m.group("regs")), int(m.group("smem") or 0))
            current = None
    return out


def ptxas_footprints(ptx: Path, arch: str = "sm_90", ptxas: str | None = None) -> dict[str, tuple[int, int]]:
    """{entry: (registers, static shared bytes)} of every entry of one PTX module, as ptxas
    compiles it for ``arch``. Needs ptxas (CUDA toolkit) on PATH, or its path."""
    exe = ptxas or shutil.which("ptxas")
    if exe is None:
        raise FileNotFoundError("ptxas not found: install the CUDA toolkit (nvcc's bin/) or pass its path")
    proc = subprocess.run([exe, f"-arch={arch}", "-v", str(ptx), "-o", "/dev/null"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"ptxas failed on {ptx}:\n{proc.stderr[-2000:]}")
    return parse_ptxas_verbose(proc.stdout + proc.stderr)


def launch_footprint(launch, table: dict[str, tuple[int, int]]) -> Footprint:
    """A Program launch's per-CTA footprint from a ``ptxas_footprints``-style table."""
    regs, static = table[launch.entry]
    threads = launch.block[0] * launch.block[1] * launch.block[2]
    return Footprint(regs, threads, static + launch.shared)


def neighbour_rows(launches, table: dict[str, tuple[int, int]], sm: SmLimits = SmLimits()) -> list[dict]:
    """For each launch after the first: how many of its CTAs fit on an SM beside k CTAs of the
    launch before it (k = 0 .. as many of those as fit alone): under PDL a launch's CTAs start
    while its predecessor's are resident."""
    rows = []
    prints = [launch_footprint(l, table) for l in launches]
    for i in range(1, len(launches)):
        prev, new = prints[i - 1], prints[i]
        alone = fit_beside(prev, [], sm)
        rows.append({
            "launch": launches[i].label or launches[i].entry, "entry": launches[i].entry,
            "prev": launches[i - 1].label or launches[i - 1].entry,
            "regs": new.regs, "threads": new.threads, "smem": new.smem,
            "prev_regs": prev.regs, "prev_threads": prev.threads, "prev_smem": prev.smem,
            "beside_prev": [fit_beside(new, [(prev, k)], sm) for k in range(alone + 1)],
        })
    return rows


def format_rows(rows: list[dict]) -> str:
    """A text table of ``neighbour_rows``."""
    me = [f"{r['launch']} ({r['regs']} x {r['threads']}, {r['smem'] // 1024} KB)" for r in rows]
    prev = [f"{r['prev']} ({r['prev_regs']} x {r['prev_threads']}, {r['prev_smem'] // 1024} KB)" for r in rows]
    w1 = max([len("launch (registers x threads, shared)"), *map(len, me)])
    w2 = max([len("after"), *map(len, prev)])
    lines = [f"{'launch (registers x threads, shared)':<{w1}}  {'after':<{w2}}  CTAs that fit beside k of it, k = 0, 1, ..."]
    for r, a, b in zip(rows, me, prev):
        lines.append(f"{a:<{w1}}  {b:<{w2}}  {' '.join(str(n) for n in r['beside_prev'])}")
    return "\n".join(lines)

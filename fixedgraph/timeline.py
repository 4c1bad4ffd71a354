"""Per-CTA timelines of one graph replay, from timeline-traced kernels (host side, no GPU needed).

Kernels built with ``tools/build_ptx.py --trace DIR`` append one record per CTA (see
``ptx/src/pdl.cuh``): the entry's name hash, the SM, the CTA index and three ``%globaltimer``
stamps (ns): at entry, after its PDL wait, at its last thread's exit. This module turns the
records of one replay into per-launch facts the event timer cannot see: how long before its
predecessor finished a launch's first CTAs were resident (the weight preload's window), how long
after the predecessor's last CTA exited the first CTA passed its wait (the dependency's latency),
how long the launch ran after that, and how its CTAs spread over the SMs. A kernel with phases
marks their ends (``FG_TRACE_MARK(k)``); each launch then reports when its last CTA reached each
mark, counted from its first CTA's wait.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields

import numpy as np

MARKS = 8  # FG_TRACE_MARKS: stamps a kernel may set with FG_TRACE_MARK(k) (0: not reached)
WORDS = 6 + MARKS  # u64 per record: tag << 32 | sm, cta, t_start, t_wait (0: none), t_end, t_wait_last, marks


def fnv1a(name: str) -> int:
    """The entry tag the traced kernels compute from their name."""
    h = 2166136261
    for b in name.encode():
        h = ((h ^ b) * 16777619) & 0xFFFFFFFF
    return h


@dataclass
class LaunchTimes:
    index: int  # op index in the program
    label: str
    entry: str
    ctas: int
    sms: int  # distinct SMs its CTAs ran on
    start_first: float  # µs from the replay's first CTA start
    start_last: float
    wait_first: float | None  # first CTA past its PDL wait (None: the entry does not wait)
    wait_last: float | None
    end_first: float
    end_last: float
    early_us: float | None  # predecessor's last exit minus this launch's first start (> 0: resident early)
    release_us: float | None  # first wait passed minus predecessor's last exit
    after_wait_us: float | None  # this launch's last exit minus its first wait passed
    step_us: float | None  # this launch's last exit minus the predecessor's
    marks_us: list[float | None] | None = None  # mark k reached by the last CTA, minus the first wait passed
    # per CTA: mark k minus the CTA's own wait passed (its start when it has no wait), median over
    # the CTAs that reached it (a phase's typical cost, apart from the stragglers marks_us shows)
    cta_marks_us: list[float | None] | None = None
    # per CTA: its last warp past the wait minus its first (warps busy before the wait, e.g. with
    # a dependent load, reach it late), median over the CTAs
    wait_spread_us: float | None = None
    # CTAs that started only after the predecessor's last CTA exited (they could not be resident
    # early: the SMs were full), as a share of the launch's, and whether the launch's last exit
    # was one of theirs (then the step waits on CTAs that started late, not on the dependency)
    late_share: float | None = None
    last_exit_late: bool | None = None


def parse_records(raw: np.ndarray) -> np.ndarray:
    """[n, WORDS] u64 -> structured array (tag, sm, cta, t0, tw, t1, twl, marks); twl: when the CTA's
    last warp passed its wait (tw: its first thread)."""
    raw = np.asarray(raw, dtype=np.uint64).reshape(-1, WORDS)
    out = np.zeros(len(raw), dtype=[("tag", "u4"), ("sm", "u4"), ("cta", "u8"), ("t0", "u8"), ("tw", "u8"),
                                    ("t1", "u8"), ("twl", "u8"), ("marks", "u8", (MARKS,))])
    out["tag"] = (raw[:, 0] >> np.uint64(32)).astype(np.uint32)
    out["sm"] = (raw[:, 0] & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    out["cta"], out["t0"], out["tw"], out["t1"], out["twl"] = raw[:, 1], raw[:, 2], raw[:, 3], raw[:, 4], raw[:, 5]
    out["marks"] = raw[:, 6:]
    return out


def assign(records: np.ndarray, launches: list[tuple[int, str, str, int]]) -> list[np.ndarray]:
    """Split one replay's records over its launches ``(index, label, entry, ctas)`` in program
    order: a launch of an entry takes the next ``ctas`` records of that entry by start time (a
    later launch of the same entry starts after every CTA of an earlier one has started, since
    each kernel lets its successor launch only once all its CTAs run)."""
    by_tag: dict[int, np.ndarray] = {}
    for tag in np.unique(records["tag"]):
        r = records[records["tag"] == tag]
        by_tag[int(tag)] = r[np.argsort(r["t0"], kind="stable")]
    taken: dict[int, int] = {}
    out = []
    for index, label, entry, ctas in launches:
        tag = fnv1a(entry)
        got = by_tag.get(tag, records[:0])
        k = taken.get(tag, 0)
        if k + ctas > len(got):
            raise ValueError(f"op {index} ({label}, {entry}): {ctas} CTAs expected, {len(got) - k} records left "
                             f"of that entry: the buffer dropped records or the replay was not the traced one")
        out.append(got[k:k + ctas])
        taken[tag] = k + ctas
    extra = {t: len(r) - taken.get(t, 0) for t, r in by_tag.items() if len(r) != taken.get(t, 0)}
    if extra:
        raise ValueError(f"records of entries no launch accounts for (tag: count): {extra}")
    return out


def launch_times(records: np.ndarray, launches: list[tuple[int, str, str, int]]) -> list[LaunchTimes]:
    parts = assign(records, launches)
    origin = int(records["t0"].min()) if len(records) else 0

    def us(t) -> float:
        return (int(t) - origin) / 1e3

    out: list[LaunchTimes] = []
    for (index, label, entry, ctas), r in zip(launches, parts):
        waits = r["tw"][r["tw"] > 0]
        prev_end = out[-1].end_last if out else None
        wf = us(waits.min()) if len(waits) else None
        wl = us(waits.max()) if len(waits) else None
        t = LaunchTimes(index, label, entry, ctas, len(np.unique(r["sm"])), us(r["t0"].min()), us(r["t0"].max()),
                        wf, wl, us(r["t1"].min()), us(r["t1"].max()), None, None, None, None)
        if prev_end is not None:
            t.early_us = prev_end - t.start_first
            t.release_us = None if wf is None else wf - prev_end
            t.step_us = t.end_last - prev_end
            late = (r["t0"].astype(np.int64) - origin) / 1e3 > prev_end
            t.late_share = float(late.mean()) if len(late) else None
            t.last_exit_late = bool(late[int(np.argmax(r["t1"]))]) if len(late) else None
        t.after_wait_us = None if wf is None else t.end_last - wf
        both = (r["tw"] > 0) & (r["twl"] >= r["tw"])
        if both.any():
            t.wait_spread_us = float(np.median((r["twl"][both].astype(np.int64) - r["tw"][both].astype(np.int64)) / 1e3))
        if wf is not None and r["marks"].any():
            t.marks_us = []
            for k in range(MARKS):
                m = r["marks"][:, k][r["marks"][:, k] > 0]
                t.marks_us.append(us(m.max()) - wf if len(m) else None)
            while t.marks_us[-1] is None:
                t.marks_us.pop()
            own = np.where(r["tw"] > 0, r["tw"], r["t0"]).astype(np.int64)
            t.cta_marks_us = []
            for k in range(len(t.marks_us)):
                hit = r["marks"][:, k] > 0
                d = (r["marks"][:, k][hit].astype(np.int64) - own[hit]) / 1e3
                t.cta_marks_us.append(float(np.median(d)) if len(d) else None)
        out.append(t)
    return out


_LAYER = re.compile(r"^L\d+\.")


def role(label: str) -> str:
    """A launch's label without its layer prefix ("L3.o_proj" -> "o_proj"): what it does in a layer."""
    return _LAYER.sub("", label)


def by_entry(times: list[LaunchTimes]) -> list[dict]:
    """Means over the launches of each entry (the per-layer picture of a decode step)."""
    return _group_rows(times, lambda t: t.entry)


def by_role(times: list[LaunchTimes]) -> list[dict]:
    """Means over the launches of each (role, entry): as ``by_entry``, but launches of one entry
    that do different jobs in a layer (o_proj and down_proj, both ``gemv_bf16_vec``) get their own
    rows, and a job done by another entry in one layer (layer 0's norm + qkv) its own; each row
    also carries ``role``."""
    return _group_rows(times, lambda t: (role(t.label), t.entry))


def _group_rows(times: list[LaunchTimes], key) -> list[dict]:
    rows = []
    for k in dict.fromkeys(key(t) for t in times):
        ts = [t for t in times if key(t) == k]
        entry = ts[0].entry

        def mean(key):
            v = [getattr(t, key) for t in ts if getattr(t, key) is not None]
            return float(np.mean(v)) if v else None

        def mean_marks(key):
            with_marks = [getattr(t, key) for t in ts if getattr(t, key)]
            if not with_marks:
                return None
            out = []
            for k in range(max(len(m) for m in with_marks)):
                v = [m[k] for m in with_marks if k < len(m) and m[k] is not None]
                out.append(float(np.mean(v)) if v else None)
            return out

        marks, cta_marks = mean_marks("marks_us"), mean_marks("cta_marks_us")
        rows.append({"entry": entry, "role": role(ts[0].label), "launches": len(ts), "ctas": ts[0].ctas,
                     "sms": mean("sms"),
                     "late_share": mean("late_share"), "last_exit_late": mean("last_exit_late"),
                     "early_us": mean("early_us"), "release_us": mean("release_us"),
                     "after_wait_us": mean("after_wait_us"), "step_us": mean("step_us"),
                     "wait_spread_us": mean("wait_spread_us"), "marks_us": marks,
                     "cta_marks_us": cta_marks})
    return rows


def table(times: list[LaunchTimes], roles: bool = False) -> str:
    """The per-launch facts as a table, a row per entry, or with ``roles`` a row per (role,
    entry) (``by_role``: o_proj apart from down_proj), the role after the entry's name."""
    def f(v):
        return "-" if v is None else f"{v:7.2f}"

    def pct(v):
        return "    -" if v is None else f"{100 * v:4.0f}%"

    def name(r):
        return f"{r['entry']} {r['role']}" if roles else r["entry"]

    first = "entry role" if roles else "entry"
    rows = by_role(times) if roles else by_entry(times)
    w = max([34, *(len(name(r)) for r in rows)])  # whole names: _sw / _swp entries differ at the end
    lines = [f"{first:{w}s} {'n':>3s} {'CTAs':>5s} {'SMs':>5s} {'late':>5s} {'last':>5s} {'early':>7s} {'release':>7s} "
             f"{'after':>7s} {'step':>7s} {'spread':>7s}   (µs per launch, means; late: CTAs that started only after "
             "the predecessor's last CTA exited; last: launches whose last exit was such a CTA's; early: resident "
             "before the predecessor's last CTA exited; release: its first wait passed after that exit; after: run "
             "after that wait; step: its last exit after the predecessor's; spread: a CTA's last warp past the wait "
             "after its first, median CTA)"]
    for r in rows:
        marks = "" if not r["marks_us"] else "   marks " + " ".join("-" if m is None else f"{m:.2f}"
                                                                 for m in r["marks_us"])
        if r["cta_marks_us"]:
            marks += "   per CTA " + " ".join("-" if m is None else f"{m:.2f}" for m in r["cta_marks_us"])
        lines.append(f"{name(r):{w}s} {r['launches']:3d} {r['ctas']:5d} {r['sms']:5.0f} {pct(r['late_share'])} "
                     f"{pct(r['last_exit_late'])} {f(r['early_us'])} "
                     f"{f(r['release_us'])} {f(r['after_wait_us'])} {f(r['step_us'])} {f(r['wait_spread_us'])}{marks}")
    if any(r["marks_us"] for r in rows):
        lines.append("marks: when the launch's last CTA reached each FG_TRACE_MARK(k), µs after its first wait "
                     "passed; per CTA: the median CTA's mark k after its own wait (its start when it has none)")
    total = times[-1].end_last - times[0].start_first if times else 0.0
    lines.append(f"replay span {total:.1f} µs over {len(times)} launches")
    return "\n".join(lines)


def chrome_trace(records: np.ndarray, launches: list[tuple[int, str, str, int]]) -> str:
    """Perfetto / chrome://tracing JSON: one track per SM, one slice per CTA (named by its launch),
    an instant mark where it passed its PDL wait and at each FG_TRACE_MARK it reached."""
    parts = assign(records, launches)
    origin = int(records["t0"].min()) if len(records) else 0
    events = []
    for (index, label, entry, _), r in zip(launches, parts):
        for rec in r:
            ts = (int(rec["t0"]) - origin) / 1e3
            args = {"cta": int(rec["cta"]), "entry": entry}
            if rec["tw"]:
                args["wait_us"] = (int(rec["tw"]) - int(rec["t0"])) / 1e3
            events.append({"name": f"{index} {label}", "cat": entry, "ph": "X", "pid": 0, "tid": int(rec["sm"]),
                           "ts": ts, "dur": (int(rec["t1"]) - int(rec["t0"])) / 1e3, "args": args})
            if rec["tw"]:
                events.append({"name": "wait passed", "ph": "i", "s": "t", "pid": 0, "tid": int(rec["sm"]),
                               "ts": (int(rec["tw"]) - origin) / 1e3})
            for k, m in enumerate(rec["marks"]):
                if m:
                    events.append({"name": f"mark {k}", "ph": "i", "s": "t", "pid": 0, "tid": int(rec["sm"]),
                                   "ts": (int(m) - origin) / 1e3})
    meta = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": sm, "args": {"name": f"SM {sm}"}}
            for sm in sorted({e["tid"] for e in events})]
    return json.dumps({"traceEvents": meta + events, "displayTimeUnit": "ns"})


def sm_placement(records: np.ndarray, launches: list[tuple[int, str, str, int]], ahead: int = 3) -> list[dict]:
    """Where each entry's CTAs sat, means over its launches: the SMs a launch used, the share of
    its CTAs on an SM holding 1 / 2 / 3+ CTAs of the same launch (a launch is as fast as its most
    crowded SM), for k = 1..``ahead`` the share of its CTAs whose SM held, at the same time, a
    CTA of the launch k later (whose weight preloads then share that SM's memory pipe), and the
    10th / 50th / 90th percentile of its CTAs' times from their PDL wait (their start when they
    have none) to their exit, in µs: a wide spread between CTAs of equal work says some SMs are
    slower for them (e.g. left with a small L1 by the CTAs before)."""
    parts = assign(records, launches)
    per = []
    for (_, _, entry, _), r in zip(launches, parts):
        run = np.where(r["tw"] > 0, r["tw"], r["t0"])
        per.append((entry, r["sm"], r["t0"] / 1e3, r["t1"] / 1e3, run / 1e3))
    return _placement(per, ahead)


def sm_placement_from_trace(trace: dict, ahead: int = 3) -> list[dict]:
    """sm_placement from a saved chrome_trace (its CTA slices: launch index and label, SM, start,
    duration), for timelines whose raw records were not kept."""
    by_launch: dict[int, list] = {}
    for e in trace["traceEvents"]:
        if e.get("ph") == "X":
            by_launch.setdefault(int(e["name"].split(" ", 1)[0]), []).append(e)
    per = []
    for i in sorted(by_launch):
        es = by_launch[i]
        start = np.array([e["ts"] for e in es])
        wait = np.array([e.get("args", {}).get("wait_us", 0.0) for e in es])  # older traces: none
        per.append((es[0]["cat"], np.array([e["tid"] for e in es]), start,
                    np.array([e["ts"] + e["dur"] for e in es]), start + wait))
    return _placement(per, ahead)


def _placement(per_launch: list[tuple], ahead: int) -> list[dict]:
    """per_launch: (entry, SM per CTA, start, end and wait passed (else start) per CTA, in µs) in
    program order."""
    rows: dict[str, dict] = {}
    for i, (entry, sm, start, end, run) in enumerate(per_launch):
        if not len(sm):
            continue
        sms = np.asarray(sm).astype(np.int64)
        _, inverse, counts = np.unique(sms, return_inverse=True, return_counts=True)
        per_cta = counts[inverse]  # CTAs of this launch on each CTA's SM
        row = rows.setdefault(entry, {"entry": entry, "launches": 0, "ctas": 0, "sms": 0.0,
                                      "stack": [0.0, 0.0, 0.0], "shared_with": [0.0] * ahead,
                                      "cta_us": [0.0, 0.0, 0.0]})
        row["launches"] += 1
        row["ctas"] = len(sms)
        row["sms"] += len(counts)
        for j, lo, hi in ((0, 1, 1), (1, 2, 2), (2, 3, 1 << 30)):
            row["stack"][j] += float(np.mean((per_cta >= lo) & (per_cta <= hi)))
        t0, t1 = np.asarray(start, dtype=np.float64), np.asarray(end, dtype=np.float64)
        for j, q in enumerate(np.percentile(t1 - np.asarray(run, dtype=np.float64), [10, 50, 90])):
            row["cta_us"][j] += float(q)
        for k in range(1, ahead + 1):
            if i + k >= len(per_launch) or not len(per_launch[i + k][1]):
                continue
            _, osm, o0, o1, _ = per_launch[i + k]
            osm, o0, o1 = np.asarray(osm).astype(np.int64), np.asarray(o0, np.float64), np.asarray(o1, np.float64)
            hit = (sms[:, None] == osm[None, :]) & (t0[:, None] < o1[None, :]) & (o0[None, :] < t1[:, None])
            row["shared_with"][k - 1] += float(np.mean(hit.any(axis=1)))
    out = []
    for row in rows.values():
        n = row["launches"]
        out.append({"entry": row["entry"], "launches": n, "ctas": row["ctas"], "sms": row["sms"] / n,
                    "stack": [v / n for v in row["stack"]], "shared_with": [v / n for v in row["shared_with"]],
                    "cta_us": [v / n for v in row["cta_us"]]})
    return out


def placement_table(rows: list[dict]) -> str:
    ahead = len(rows[0]["shared_with"]) if rows else 0
    w = max([34, *(len(r["entry"]) for r in rows)])
    lines = [f"{'entry':{w}s} {'n':>3s} {'CTAs':>5s} {'SMs':>5s} {'1/SM':>5s} {'2/SM':>5s} {'3+/SM':>5s}   "
             + " ".join(f"{'+' + str(k):>5s}" for k in range(1, ahead + 1))
             + f"   {'p10':>6s} {'p50':>6s} {'p90':>6s}"
             + "   (CTAs on an SM holding 1 / 2 / 3+ CTAs of their launch; +k: CTAs whose SM held a CTA of "
             "the launch k later at the same time; p10 / p50 / p90: a CTA's µs from its wait to its exit; means over "
             "launches)"]
    for r in rows:
        lines.append(f"{r['entry']:{w}s} {r['launches']:3d} {r['ctas']:5d} {r['sms']:5.0f} "
                     + " ".join(f"{100 * v:4.0f}%" for v in r["stack"]) + "   "
                     + " ".join(f"{100 * v:4.0f}%" for v in r["shared_with"]) + "   "
                     + " ".join(f"{v:6.2f}" for v in r["cta_us"]))
    return "\n".join(lines)


COMPARED = ("step_us", "release_us", "after_wait_us", "early_us")  # compare(): the columns, in order


def compare(sides: dict[str, dict]) -> str:
    """Timelines of one decode step side by side (A/B trees, knobs), a block per (role, entry) of
    the first side: each side's means of ``COMPARED`` and the median CTA's marks, and each
    column's difference from the first side; then each side's replay span. ``sides``: name ->
    a ``tools/timeline.py`` JSON (``launches`` as ``to_json`` writes them). Roles one side lacks
    print as absent; a side's own extra roles are listed after. A role that several entries do
    within one side (layer 0's norm + qkv on another entry than the other layers') is matched
    across sides by the order of those entries' first launches, each side's entry on its line."""
    groups, spans = {}, {}
    for name, d in sides.items():
        known = {f.name for f in fields(LaunchTimes)}  # a side written by an older timeline.py
        times = [LaunchTimes(**{k: v for k, v in t.items() if k in known}) for t in d["launches"]]
        rows, seen = {}, {}
        for r in by_role(times):
            i = seen[r["role"]] = seen.get(r["role"], -1) + 1
            rows[(r["role"], i)] = r
        groups[name] = rows
        spans[name] = times[-1].end_last - times[0].start_first if times else 0.0
    names = list(sides)
    first = groups[names[0]]
    keys = list(first)
    for n in names[1:]:
        keys += [k for k in groups[n] if k not in keys]
    several = {k[0] for n in names for k in groups[n] if k[1] > 0}

    def cell(v, b):
        text = f"{'-':>7s}" if v is None else f"{v:7.2f}"
        return text + (f" {v - b:+6.2f}" if v is not None and b is not None else " " * 7)

    w = max(len(n) for n in names)
    head = f"{'':{w}s} {'n':>3s} " + " ".join(f"{c.replace('_us', ''):>14s}" for c in COMPARED)
    lines = [f"µs per launch, means over a role's launches; each column's change from {names[0]} beside it; "
             "CTA marks: the median CTA's FG_TRACE_MARK(k) after its own wait", head]
    for k in keys:
        lines.append(k[0] + (f" #{k[1]}" if k[0] in several else ""))
        base = first.get(k)
        for n in names:
            r = groups[n].get(k)
            if r is None:
                lines.append(f"{n:{w}s}   -  absent")
                continue
            ref = base if base is not None and n != names[0] else None
            cols = " ".join(cell(r[c], None if ref is None else ref[c]) for c in COMPARED)
            marks = "" if not r["cta_marks_us"] else "   CTA marks " + " ".join(
                "-" if m is None else f"{m:.2f}" for m in r["cta_marks_us"])
            lines.append(f"{n:{w}s} {r['launches']:3d} {cols}   {r['entry']}{marks}")
    lines.append("replay span µs: " + ", ".join(f"{n} {spans[n]:.1f}" for n in names))
    return "\n".join(lines)


def to_json(times: list[LaunchTimes]) -> list[dict]:
    return [asdict(t) for t in times]


def capture(llm, context: int = 128, warmup: int = 5, cap: int = 1 << 16) -> tuple[np.ndarray, list]:
    """Replay the decode graph at ``context`` keys once with recording on, on an engine whose
    kernels were loaded from timeline-traced PTX (FIXEDGRAPH_PTX_DIR; the reference backend
    writes synthetic records, for tests). Returns (records, launches) for ``launch_times`` /
    ``chrome_trace``."""
    from fixedgraph.backends.base import BoundLaunch
    from fixedgraph.profile import _eager_decode

    dev, r = llm.device, llm.runner
    seq, bound = _eager_decode(llm, context)
    graph = dev.graph(bound)
    buf = dev.alloc(cap * WORDS * 8 + 256)
    count = buf + cap * WORDS * 8
    try:
        for _ in range(warmup):
            graph.launch()
        dev.synchronize()
        dev.memset(count, 0, 8)
        dev.set_trace(buf, count, cap)
        graph.launch()
        dev.synchronize()
        dev.set_trace(0, count, 0)
        n = int(np.frombuffer(dev.read(count, 4), dtype=np.uint32)[0])
        if n > cap:
            raise ValueError(f"{n} CTA records, the buffer holds {cap}: pass a larger cap")
        raw = np.frombuffer(dev.read(buf, n * WORDS * 8), dtype=np.uint64)
    finally:
        dev.free(buf)
        r.alloc.free(seq)
        r.resync()
    launches = []
    for i, op in enumerate(bound.ops):
        if isinstance(op, BoundLaunch):
            g = op.op.grid
            launches.append((i, op.op.label or op.entry.name, op.entry.name, int(g[0] * g[1] * g[2])))
    return parse_records(raw), launches

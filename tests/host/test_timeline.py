"""fixedgraph.timeline on synthetic CTA records, and the traced PTX build (tools/build_ptx.py --trace)."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fixedgraph import timeline

ROOT = Path(__file__).resolve().parents[2]


def _rec(entry, sm, cta, t0, tw, t1, marks=(), twl=None):
    return ([(timeline.fnv1a(entry) << 32) | sm, cta, t0, tw, t1, tw if twl is None else twl] + list(marks)
            + [0] * (timeline.MARKS - len(marks)))


def test_fnv1a_matches_the_reference_values():
    assert timeline.fnv1a("") == 0x811C9DC5 and timeline.fnv1a("a") == 0xE40C292C


def test_launch_times_from_records():
    # A (2 CTAs), B (3 CTAs, resident 500 ns before A's last exit), A again (2 CTAs); shuffled
    rows = [_rec("A", 0, 0, 1000, 1100, 3000), _rec("A", 1, 1, 1200, 1300, 3500),
            _rec("B", 2, 0, 3000, 4000, 6000), _rec("B", 0, 1, 3600, 4100, 6500), _rec("B", 1, 2, 3700, 4200, 6200),
            _rec("A", 0, 0, 6400, 7000, 8000), _rec("A", 2, 1, 6450, 7100, 9000)]
    raw = np.array([rows[i] for i in (4, 0, 6, 2, 1, 5, 3)], dtype=np.uint64)
    launches = [(1, "a0", "A", 2), (2, "b", "B", 3), (3, "a1", "A", 2)]
    times = timeline.launch_times(timeline.parse_records(raw), launches)
    a0, b, a1 = times
    assert (a0.start_first, a0.end_last, a0.wait_first, a0.sms) == (0.0, 2.5, 0.1, 2)
    assert b.early_us == pytest.approx(0.5) and b.release_us == pytest.approx(0.5)
    assert b.after_wait_us == pytest.approx(2.5) and b.step_us == pytest.approx(3.0)
    assert a1.early_us == pytest.approx(0.1) and a1.release_us == pytest.approx(0.5) and a1.end_last == 8.0
    # B's CTAs 1 and 2 started after A's last exit (2.5 us), and CTA 1's exit is B's last; a1 all early
    assert b.late_share == pytest.approx(2 / 3) and b.last_exit_late is True
    assert a1.late_share == 0.0 and a1.last_exit_late is False and a0.late_share is None
    rows_by_entry = {r["entry"]: r for r in timeline.by_entry(times)}
    assert rows_by_entry["B"]["late_share"] == pytest.approx(2 / 3) and rows_by_entry["B"]["last_exit_late"] == 1.0
    assert "  67%  100%" in timeline.table(times)
    assert rows_by_entry["A"]["launches"] == 2 and rows_by_entry["B"]["ctas"] == 3
    assert "replay span 8.0" in timeline.table(times)
    trace = json.loads(timeline.chrome_trace(timeline.parse_records(raw), launches))
    slices = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(slices) == 7 and {e["tid"] for e in slices} == {0, 1, 2}


def test_phase_marks_report_the_last_cta_per_mark():
    # two launches of M (2 CTAs each): marks 0 and 2 set, mark 1 never reached
    rows = [_rec("M", 0, 0, 1000, 2000, 9000, [3000, 0, 5000]), _rec("M", 1, 1, 1100, 2500, 9500, [4000, 0, 4500]),
            _rec("M", 0, 0, 9600, 10000, 12000, [11000, 0, 11500]),
            _rec("M", 1, 1, 9700, 10100, 12100, [10500, 0, 11000])]
    times = timeline.launch_times(timeline.parse_records(np.array(rows, dtype=np.uint64)),
                                  [(0, "m0", "M", 2), (1, "m1", "M", 2)])
    assert times[0].marks_us == pytest.approx([2.0, None, 3.0]) and times[1].marks_us == pytest.approx([1.0, None, 1.5])
    row = timeline.by_entry(times)[0]
    assert row["marks_us"] == pytest.approx([1.5, None, 2.25])
    assert "marks 1.50 - 2.25" in timeline.table(times)
    # per CTA: each CTA's mark after its own wait, the median over the CTAs that reached it
    assert times[0].cta_marks_us == pytest.approx([1.25, None, 2.5])
    assert times[1].cta_marks_us == pytest.approx([0.7, None, 1.2])
    assert row["cta_marks_us"] == pytest.approx([0.975, None, 1.85])
    assert "per CTA 0.97 - 1.85" in timeline.table(times) or "per CTA 0.98 - 1.85" in timeline.table(times)
    # no marks anywhere: none reported
    plain = timeline.launch_times(timeline.parse_records(np.array([_rec("A", 0, 0, 1, 2, 3)], dtype=np.uint64)),
                                  [(0, "a", "A", 1)])
    assert plain[0].marks_us is None and "marks" not in timeline.table(plain)


def test_missing_or_extra_records_are_named():
    raw = np.array([_rec("A", 0, 0, 1, 2, 3)], dtype=np.uint64)
    with pytest.raises(ValueError, match="2 CTAs expected, 1 records left"):
        timeline.launch_times(timeline.parse_records(raw), [(0, "a", "A", 2)])
    raw = np.array([_rec("A", 0, 0, 1, 2, 3), _rec("C", 0, 0, 1, 2, 3)], dtype=np.uint64)
    with pytest.raises(ValueError, match="no launch accounts for"):
        timeline.launch_times(timeline.parse_records(raw), [(0, "a", "A", 1)])


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: the traced PTX build needs it")
def test_traced_build_carries_the_globals_and_the_committed_ptx_does_not(tmp_path):
    subprocess.run([sys.executable, str(ROOT / "tools/build_ptx.py"), "--trace", str(tmp_path), "meta"], check=True,
                   capture_output=True)
    traced = (tmp_path / "meta.ptx").read_text()
    assert "fg_trace_buf" in traced and "globaltimer" in traced and "-DFG_TRACE" in traced.splitlines()[0]
    # nvcc folds each entry's name hash into its record's first word: the host's hash must match
    assert str(timeline.fnv1a("stage_meta_ring") << 32) in traced
    # the record layout the host parses (6 fixed words + the marks) is the one the kernels write
    src = (ROOT / "ptx/src/pdl.cuh").read_text()
    assert f"#define FG_TRACE_MARKS {timeline.MARKS}" in src and "#define FG_TRACE_WORDS (6 + FG_TRACE_MARKS)" in src
    for p in (ROOT / "ptx").glob("*.ptx"):
        assert "fg_trace_buf" not in p.read_text(), p


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc not found: the traced PTX build needs it")
def test_light_trace_drops_the_entry_barrier_and_keeps_the_records(tmp_path):
    # --light: thread 0 alone stamps and writes the record, so each entry loses the barrier the
    # full trace adds at its start and keeps the record layout the host parses
    full, light = tmp_path / "full", tmp_path / "light"
    for d, extra in ((full, []), (light, ["--light"])):
        subprocess.run([sys.executable, str(ROOT / "tools/build_ptx.py"), "--trace", str(d), *extra, "meta"],
                       check=True, capture_output=True)
    f, l = (full / "meta.ptx").read_text(), (light / "meta.ptx").read_text()
    assert "-DFG_TRACE_LIGHT" in l.splitlines()[0] and "-DFG_TRACE_LIGHT" not in f.splitlines()[0]
    assert "fg_trace_buf" in l and "globaltimer" in l
    assert str(timeline.fnv1a("stage_meta_ring") << 32) in l
    entries = l.count(".entry ")
    bars = lambda t: len(re.findall(r"\bbar(?:rier)?\.sync", t))  # noqa: E731
    assert entries >= 2 and bars(f) - bars(l) >= entries
    proc = subprocess.run([sys.executable, str(ROOT / "tools/build_ptx.py"), "--light", "meta"], capture_output=True,
                          text=True)
    assert proc.returncode != 0 and "--light needs --trace" in proc.stderr


def test_every_kernel_entry_opens_its_trace_scope():
    # a new entry without FG_KERNEL_BEGIN() would leave its CTAs out of every timeline, and the
    # timeline would then refuse the replay (its launches' records missing)
    import re

    for cu in sorted((ROOT / "ptx/src").glob("*.cu")):
        text = cu.read_text()
        for m in re.finditer(r'extern "C" __global__', text):
            body = text[text.index("{", m.end()):][:40]
            assert body.startswith("{ FG_KERNEL_BEGIN();"), f"{cu.name}: entry at offset {m.start()} lacks FG_KERNEL_BEGIN()"


def test_wait_spread_is_the_median_ctas_last_warp_after_its_first():
    # one launch of 3 CTAs: its last warps passed the wait 0.2, 1.0 and 0.6 us after the first
    rows = [_rec("P", 0, 0, 0, 1000, 3000, twl=1200), _rec("P", 1, 1, 0, 1100, 3100, twl=2100),
            _rec("P", 2, 2, 0, 1200, 3200, twl=1800)]
    (t,) = timeline.launch_times(timeline.parse_records(np.array(rows, dtype=np.uint64)), [(0, "p", "P", 3)])
    assert t.wait_spread_us == pytest.approx(0.6)
    assert timeline.by_entry([t])[0]["wait_spread_us"] == pytest.approx(0.6)
    assert "spread" in timeline.table([t])
    # an entry without a wait has no spread
    (n,) = timeline.launch_times(timeline.parse_records(np.array([_rec("N", 0, 0, 0, 0, 10, twl=0)], dtype=np.uint64)),
                                 [(0, "n", "N", 1)])
    assert n.wait_spread_us is None


def test_sm_placement_counts_stacking_and_sharing(tmp_path):
    # A: CTAs 0, 1 on SM 0 and CTA 2 on SM 1; B (next launch): one CTA on SM 1 while A's CTA 2 runs,
    # one on SM 2; then A again, its two CTAs on SMs 3 and 4
    rows = [_rec("A", 0, 0, 1000, 1100, 3000), _rec("A", 0, 1, 1010, 1100, 3000), _rec("A", 1, 2, 1020, 1100, 3000),
            _rec("B", 1, 0, 2000, 3100, 4000), _rec("B", 2, 1, 2100, 3100, 4000),
            _rec("A", 3, 0, 4100, 4200, 5000), _rec("A", 4, 1, 4150, 4200, 5000)]
    recs = timeline.parse_records(np.array(rows, dtype=np.uint64))
    launches = [(1, "a0", "A", 3), (2, "b", "B", 2), (3, "a1", "A", 2)]
    got = {r["entry"]: r for r in timeline.sm_placement(recs, launches, ahead=2)}
    a, b = got["A"], got["B"]
    assert a["launches"] == 2 and a["sms"] == pytest.approx((2 + 2) / 2)
    assert a["stack"] == pytest.approx([(1 / 3 + 1) / 2, (2 / 3 + 0) / 2, 0.0])  # 2 of 3 stacked in launch 1
    assert a["shared_with"][0] == pytest.approx((1 / 3 + 0) / 2)  # CTA 2 beside B's CTA on SM 1
    assert b["stack"] == [1.0, 0.0, 0.0] and b["shared_with"] == [0.0, 0.0]
    # CTA times from their wait to their exit: A's first launch 1.9 us each, its second 0.8; B 0.9
    assert a["cta_us"] == pytest.approx([(1.9 + 0.8) / 2] * 3) and b["cta_us"] == pytest.approx([0.9] * 3)
    # the same from the saved Perfetto trace (what tools/timeline_sm.py reads)
    trace = json.loads(timeline.chrome_trace(recs, launches))
    again = {r["entry"]: r for r in timeline.sm_placement_from_trace(trace, ahead=2)}
    for e in ("A", "B"):
        assert again[e]["stack"] == pytest.approx(got[e]["stack"])
        assert again[e]["shared_with"] == pytest.approx(got[e]["shared_with"])
        assert again[e]["cta_us"] == pytest.approx(got[e]["cta_us"])
    path = tmp_path / "t.json"
    path.write_text(json.dumps(trace))
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "timeline_sm.py"), str(path)], capture_output=True,
                         text=True, check=True).stdout
    assert "3+/SM" in out and "A" in out and "p90" in out


def _times(spec):
    """LaunchTimes from (label, entry, step, release) tuples, one CTA each, back to back."""
    rows, launches, t = [], [], 1000
    for i, (label, entry, step, release) in enumerate(spec):
        start = t - 500  # resident 0.5 us before the predecessor's exit
        wait = t + int(release * 1000)
        end = t + int(step * 1000)
        rows.append(_rec(entry, i % 4, 0, start, wait, end))
        launches.append((i, label, entry, 1))
        t = end
    return timeline.launch_times(timeline.parse_records(np.array(rows, dtype=np.uint64)), launches)


LAYER = [("L{}.norm+qkv_proj", "Q"), ("L{}.o_proj", "V"), ("L{}.down_proj", "V")]


def _step(steps, first_qkv="G"):
    spec = [("stage", "S", 1.0, 0.5)]
    for layer in range(2):
        for (label, entry), (step, release) in zip(LAYER, steps):
            spec.append((label.format(layer), first_qkv if layer == 0 and entry == "Q" else entry, step, release))
    return _times(spec)


def test_roles_split_one_entry_by_what_it_does():
    times = _step([(4.0, 1.0), (3.0, 1.0), (5.0, 1.2)])
    assert timeline.role("L12.o_proj") == "o_proj" and timeline.role("lm_head") == "lm_head"
    roles = [(r["role"], r["entry"], r["launches"]) for r in timeline.by_role(times)]
    assert roles == [("stage", "S", 1), ("norm+qkv_proj", "G", 1), ("o_proj", "V", 2), ("down_proj", "V", 2),
                     ("norm+qkv_proj", "Q", 1)]
    by_entry = {r["entry"]: r for r in timeline.by_entry(times)}
    assert by_entry["V"]["launches"] == 4 and by_entry["V"]["step_us"] == pytest.approx(4.0)
    rows = {(r["role"], r["entry"]): r for r in timeline.by_role(times)}
    assert rows[("o_proj", "V")]["step_us"] == pytest.approx(3.0) and rows[("down_proj", "V")]["step_us"] == pytest.approx(5.0)
    assert "V down_proj" in timeline.table(times, roles=True) and "V down_proj" not in timeline.table(times)


def test_compare_lines_up_roles_and_entries_across_sides():
    base = {"launches": timeline.to_json(_step([(4.0, 1.0), (3.0, 1.0), (5.0, 1.2)]))}
    # the other side: down_proj 0.5 us faster, layer 0's norm + qkv on another entry
    other = {"launches": timeline.to_json(_step([(4.0, 1.0), (3.0, 1.0), (4.5, 1.2)], first_qkv="R"))}
    text = timeline.compare({"base": base, "x": other})
    lines = text.splitlines()
    i = lines.index("down_proj")
    assert lines[i + 1].split()[:3] == ["base", "2", "5.00"] and lines[i + 2].split()[:4] == ["x", "2", "4.50", "-0.50"]
    # norm + qkv is done by two entries a side: matched by order, each side's entry on its line
    j = lines.index("norm+qkv_proj #0")
    assert lines[j + 1].split()[-1] == "G" and lines[j + 2].split()[-1] == "R" and "+0.00" in lines[j + 2]
    assert "norm+qkv_proj #1" in lines
    spans = lines[-1]
    assert spans.startswith("replay span µs: base ") and "x " in spans
    # a role only one side has
    extra = {"launches": timeline.to_json(_times([("stage", "S", 1.0, 0.5), ("head", "H", 80.0, 2.0)]))}
    lines = timeline.compare({"base": base, "y": extra}).splitlines()
    k = lines.index("head")  # listed after the first side's roles, absent there
    assert lines[k + 1].split() == ["base", "-", "absent"] and lines[k + 2].split()[:3] == ["y", "1", "80.00"]
    assert lines[lines.index("o_proj") + 2].split() == ["y", "-", "absent"]


def test_timeline_cmp_tool(tmp_path):
    base = {"launches": timeline.to_json(_step([(4.0, 1.0), (3.0, 1.0), (5.0, 1.2)]))}
    (tmp_path / "a.json").write_text(json.dumps(base))
    (tmp_path / "bad.json").write_text(json.dumps({"no": 1}))
    tool = str(ROOT / "tools" / "timeline_cmp.py")
    out = subprocess.run([sys.executable, tool, f"main={tmp_path / 'a.json'}", f"again={tmp_path / 'a.json'}"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "o_proj" in out.stdout and "+0.00" in out.stdout
    bad = subprocess.run([sys.executable, tool, str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2 and "not a tools/timeline.py JSON" in bad.stderr

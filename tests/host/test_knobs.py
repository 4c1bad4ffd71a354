"""The FIXEDGRAPH_* registry: complete, documented, and checked against the environment."""
import re
from pathlib import Path

import pytest

from fixedgraph import knobs
from fixedgraph.engine import LLM

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"FIXEDGRAPH_[A-Z0-9_]*[A-Z0-9]")


def _names_in_sources() -> set[str]:
    files = [ROOT / "setup.py", *ROOT.glob("fixedgraph/**/*.py"), *ROOT.glob("runtime_pyx/*.pyx"),
             *ROOT.glob("tools/*.py"), *ROOT.glob("tools/*.sh"), *ROOT.glob("tests/**/*.py"), *ROOT.glob(".ci/*")]
    here = Path(__file__).resolve()
    return {m for f in files if f.is_file() and f.resolve() != here for m in NAME.findall(f.read_text(errors="replace"))}


def test_registry_lists_exactly_the_variables_the_sources_name():
    found = _names_in_sources()
    listed = set(knobs.BY_NAME)
    assert found - listed == set(), f"read but not in fixedgraph/knobs.py: {sorted(found - listed)}"
    assert listed - found == set(), f"listed but read nowhere: {sorted(listed - found)}"
    assert len(knobs.KNOBS) == len(listed)  # no name twice
    assert {k.scope for k in knobs.KNOBS} <= {"runtime", "debug", "tuning", "build", "tools"}


def test_docs_table_is_current():
    assert knobs.markdown() in (ROOT / "docs/KNOBS.md").read_text(), \
        "docs/KNOBS.md is stale: regenerate its table with python3 tools/list_knobs.py --markdown"


def test_unknown_variables_are_named_with_the_likely_intent():
    env = {"FIXEDGRAPH_ATTN_SWP": "0", "FIXEDGRAPH_DECODE_GROUP": "2", "FIXEDGRAPH_NONSENSE_THING": "1", "PATH": "/x"}
    assert knobs.unknown(env) == [("FIXEDGRAPH_ATTN_SWP", "FIXEDGRAPH_ATTN_SWAP"), ("FIXEDGRAPH_NONSENSE_THING", None)]
    assert knobs.set_knobs(env) == {"FIXEDGRAPH_DECODE_GROUP": "2"}
    text = knobs.describe_unknown(knobs.unknown(env))
    assert "FIXEDGRAPH_ATTN_SWP is set but fixedgraph reads no such variable (did you mean FIXEDGRAPH_ATTN_SWAP?)" in text
    assert "FIXEDGRAPH_NONSENSE_THING" in text and "docs/KNOBS.md" in text
    assert knobs.unknown({"FIXEDGRAPH_WAIT": "sleep"}) == []


def test_llm_warns_about_a_misspelt_knob(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_DECODE_GRUOP", "8")
    with pytest.warns(UserWarning, match="did you mean FIXEDGRAPH_DECODE_GROUP"), pytest.raises(ValueError):
        LLM(weights=(None, None), backend="reference", lookahead=0)


def test_doctor_reports_set_and_unknown_knobs(monkeypatch):
    from fixedgraph.doctor import doctor, format_report

    monkeypatch.setenv("FIXEDGRAPH_WAIT", "sleep")
    monkeypatch.setenv("FIXEDGRAPH_WIAT", "sleep")
    r = doctor("reference")
    assert r["knobs"]["set"]["FIXEDGRAPH_WAIT"] == "sleep"
    text = format_report(r)
    assert "FIXEDGRAPH_WAIT=sleep" in text
    assert "WARNING: FIXEDGRAPH_WIAT is set but fixedgraph reads no such variable (did you mean FIXEDGRAPH_WAIT?)" in text

"""fixedgraph doctor on the reference backend: the report's facts and its smoke graph."""
import os
import subprocess
import sys

from fixedgraph.doctor import doctor, format_report
from fixedgraph.hostcpu import parse_cpulist


def test_doctor_reports_the_backend_host_and_a_working_graph():
    r = doctor("reference")
    assert r["backend"] == "reference" and r["smoke_graph"]["ok"] and r["ptx"]["entries"] > 0
    assert parse_cpulist(r["host"]["cpus_allowed"]) == set(os.sched_getaffinity(0))
    assert r["host"]["gpu_local_cpus"] is None  # no PCI device behind the reference backend
    text = format_report(r)
    assert "backend: reference" in text and "host: CPUs" in text and "OK" in text


def test_doctor_command_line():
    out = subprocess.run([sys.executable, "-m", "fixedgraph.cli", "doctor", "--backend", "reference"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "smoke graph" in out.stdout, out.stdout + out.stderr

"""fixedgraph.hostcpu: CPU lists, the GPU's local CPUs from sysfs, and what a spec resolves to."""
import os

import pytest

from fixedgraph import hostcpu


def test_parse_and_format_cpulists():
    assert hostcpu.parse_cpulist("0-3,8,10-11\n") == {0, 1, 2, 3, 8, 10, 11}
    assert hostcpu.format_cpus({0, 1, 2, 3, 8, 10, 11}) == "0-3,8,10-11"
    assert hostcpu.format_cpus({5}) == "5"
    for bad in ("", "a-b", "3-1", "1,,x"):
        with pytest.raises(ValueError, match="bad CPU list"):
            hostcpu.parse_cpulist(bad)


def test_sysfs_name_normalises_cuda_bus_ids():
    assert hostcpu.sysfs_name("00000000:1B:00.0") == "0000:1b:00.0"
    assert hostcpu.sysfs_name("0000:c3:1f.7") == "0000:c3:1f.7"
    with pytest.raises(ValueError, match="bad PCI bus id"):
        hostcpu.sysfs_name("gpu0")


def _sysfs(tmp_path, local: str):
    d = tmp_path / "0000:1b:00.0"
    d.mkdir()
    (d / "local_cpulist").write_text(local + "\n")
    return tmp_path


def test_resolve_gpu_picks_the_local_cpus_within_the_allowed(tmp_path):
    sysfs = _sysfs(tmp_path, "0-7,16-23")
    allowed = set(range(32))
    assert hostcpu.resolve("gpu", "00000000:1B:00.0", allowed, sysfs) == set(range(8)) | set(range(16, 24))
    # taskset / cgroups narrowed the process: only the local CPUs it may use
    assert hostcpu.resolve("gpu", "00000000:1B:00.0", {4, 5, 30}, sysfs) == {4, 5}
    # no local CPU usable, every allowed CPU already local, no sysfs entry, no bus id: left alone
    assert hostcpu.resolve("gpu", "00000000:1B:00.0", {30, 31}, sysfs) is None
    assert hostcpu.resolve("gpu", "00000000:1B:00.0", {1, 2}, sysfs) is None
    assert hostcpu.resolve("gpu", "00000000:2C:00.0", allowed, sysfs) is None
    assert hostcpu.resolve("gpu", None, allowed, sysfs) is None


def test_resolve_off_and_explicit_lists(tmp_path):
    allowed = {0, 1, 2, 3}
    assert hostcpu.resolve("off", "0000:1b:00.0", allowed) is None
    assert hostcpu.resolve(None, "0000:1b:00.0", allowed) is None
    assert hostcpu.resolve("1-2,9", None, allowed) == {1, 2}
    with pytest.raises(ValueError, match="names none of the CPUs"):
        hostcpu.resolve("8-9", None, allowed)


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="no sched_setaffinity on this OS")
def test_bind_thread_sets_and_reports_the_affinity():
    import threading

    allowed = set(os.sched_getaffinity(0))
    one = min(allowed)
    got = {}

    def worker():  # in a thread of its own: the test process keeps its affinity
        got["cpus"] = hostcpu.bind_thread(str(one), None)
        got["now"] = set(os.sched_getaffinity(0))
        got["off"] = hostcpu.bind_thread("off", None)

    t = threading.Thread(target=worker)
    t.start()
    t.join()
    assert got == {"cpus": {one}, "now": {one}, "off": None}
    assert set(os.sched_getaffinity(0)) == allowed


def test_speed_probe_times_real_work(tmp_path):
    p = hostcpu.speed_probe(rounds=200, reps=3)
    assert 0 < p["wall_ns_best"] <= p["wall_ns_median"]
    assert 0 <= p["cpu_ns_best"] <= p["cpu_ns_median"]
    assert p["wall_ns_median"] < 1e6  # four numpy stores: far under a millisecond a round
    if os.path.exists("/proc/thread-self/stat"):
        assert p["cpu"] in hostcpu.allowed_cpus()
    info = tmp_path / "cpuinfo"
    info.write_text("processor\t: 0\ncpu MHz\t\t: 1000.5\n\nprocessor\t: 1\ncpu MHz\t\t: 2400.000\n\n")
    assert hostcpu.cpu_mhz(1, info) == 2400.0
    assert hostcpu.cpu_mhz(0, info) == 1000.5
    assert hostcpu.cpu_mhz(7, info) != hostcpu.cpu_mhz(7, info)  # NaN: no such CPU

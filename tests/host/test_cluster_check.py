"""The CUDA backend's bind-time cluster check, against a stand-in driver (no GPU needed)."""
import pytest

from fixedgraph.backends.base import BoundLaunch
from fixedgraph.backends.cuda import CudaDevice
from fixedgraph.errors import LaunchConfigError
from fixedgraph.program import Launch
from fixedgraph.ptx import find_entry


class FakeDriver:
    def __init__(self, active: int) -> None:
        self.active, self.calls = active, []

    def function_set_non_portable_cluster(self, f):
        self.calls.append("non_portable")

    def function_max_active_clusters(self, f, grid, block, shared, cluster):
        self.calls.append(("query", cluster))
        return self.active


def device(active: int, cc_major: int = 9) -> CudaDevice:
    dev = object.__new__(CudaDevice)  # no driver: only what _check_cluster reads
    dev.drv, dev._props = FakeDriver(active), {"cc_major": cc_major, "cc_minor": 0}
    dev._non_portable, dev._clusters_ok = set(), set()
    return dev


def bound(cluster, shared=0) -> BoundLaunch:
    launch = Launch("cluster_probe", 16, 128, [0], shared, "probe", cluster=cluster)
    module, entry = find_entry("cluster_probe")
    return BoundLaunch(launch, entry, module, [0], b"", [])


def test_zero_active_clusters_is_a_clear_error():
    dev = device(active=0)
    with pytest.raises(LaunchConfigError, match=r"cluster_probe \(probe\) cluster \(16, 1, 1\) \(16 CTAs\) of block "
                       r"\(128, 1, 1\) with 4096 bytes.*max active clusters 0.*smaller cluster"):
        dev._check_cluster(1, bound(16, shared=4096))


def test_non_portable_opt_in_once_and_checks_cached():
    dev = device(active=3)
    dev._check_cluster(1, bound(16))
    dev._check_cluster(1, bound(16))
    dev._check_cluster(1, bound(8))
    assert dev.drv.calls == ["non_portable", ("query", (16, 1, 1)), ("query", (8, 1, 1))]


def test_pre_hopper_gpu_is_refused():
    with pytest.raises(LaunchConfigError, match="compute capability 9.0 or newer, this GPU is 8.0"):
        device(active=3, cc_major=8)._check_cluster(1, bound(4))

"""FIXEDGRAPH_SMEM_CARVEOUT: parsed without a GPU, and applied to every kernel the CUDA backend
loads (against a stand-in driver)."""
import pytest

from fixedgraph.backends.cuda import CudaDevice, smem_carveout


@pytest.mark.parametrize("raw, want", [("max", 100), ("MAX", 100), ("default", None), ("-1", None), ("", None),
                                       ("0", 0), ("64", 64), ("100", 100)])
def test_values(monkeypatch, raw, want):
    monkeypatch.setenv("FIXEDGRAPH_SMEM_CARVEOUT", raw)
    assert smem_carveout() == want


@pytest.mark.parametrize("raw", ["101", "-5", "half", "1.5"])
def test_bad_values_name_the_variable_and_the_choices(monkeypatch, raw):
    monkeypatch.setenv("FIXEDGRAPH_SMEM_CARVEOUT", raw)
    with pytest.raises(ValueError, match=r"FIXEDGRAPH_SMEM_CARVEOUT=.*\"max\", \"default\" or a percent 0\.\.100"):
        smem_carveout()


class FakeDriver:
    def __init__(self) -> None:
        self.calls = []

    def module_load(self, image):
        return 7

    def module_function(self, module, entry):
        return 100 + len(self.calls)

    def function_set_carveout(self, f, pct):
        self.calls.append((f, pct))


def device(carveout, entries=None) -> CudaDevice:
    dev = object.__new__(CudaDevice)  # no driver: only what function() reads
    dev.drv, dev._modules, dev._functions, dev._carveout = FakeDriver(), {}, {}, carveout
    dev._carveout_entries = entries
    return dev


def test_every_loaded_kernel_gets_the_carveout_once():
    dev = device(100)
    f = dev.function("gemv", "gemv_bf16_vec")
    assert dev.function("gemv", "gemv_bf16_vec") == f  # cached: set once
    dev.function("gemv", "gemv_bf16")
    assert [pct for _, pct in dev.drv.calls] == [100, 100]


def test_no_preference_leaves_the_driver_alone():
    dev = device(None)
    dev.function("gemv", "gemv_bf16_vec")
    assert dev.drv.calls == []


def test_entry_list_limits_it():
    dev = device(100, {"gemv_bf16_vec"})
    dev.function("gemv", "gemv_bf16_vec")
    dev.function("gemv", "gemv_bf16")
    assert len(dev.drv.calls) == 1


# ---- per launch: fully preloaded plain GEMVs ask for the most shared memory ----------------------

from fixedgraph.errors import LaunchConfigError  # noqa: E402
from fixedgraph.ops import gemv as gemv_ops  # noqa: E402
from fixedgraph.program import Program, Ref  # noqa: E402


def plain_launch(N, K, **kw):
    p = Program("g")
    i = gemv_ops.gemv(p, Ref("out"), Ref("x"), Ref("w"), None, 1, N, K, **kw)
    return p.ops[i]


def test_default_is_no_preference(monkeypatch):
    monkeypatch.delenv("FIXEDGRAPH_GEMV_CARVEOUT", raising=False)
    assert plain_launch(1024, 3072).carveout is None


def test_whole_share_preloaded_takes_max_shared(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_GEMV_CARVEOUT", "max")
    assert plain_launch(1024, 3072).carveout == 100  # Qwen3-0.6B down_proj: 2 of 2 batches preloaded
    assert plain_launch(4096, 12288).carveout is None  # Qwen3-8B down_proj: 1 of 6, the rest streams
    assert plain_launch(1024, 3072, preload=False).carveout is None
    assert plain_launch(1024, 3001).carveout is None  # K % 8 != 0: the scalar body preloads nothing


def test_knob_off_and_junk(monkeypatch):
    monkeypatch.setenv("FIXEDGRAPH_GEMV_CARVEOUT", "default")
    assert plain_launch(1024, 3072).carveout is None
    monkeypatch.setenv("FIXEDGRAPH_GEMV_CARVEOUT", "most")
    with pytest.raises(ValueError, match=r"FIXEDGRAPH_GEMV_CARVEOUT='most'.*\"max\".*\"default\""):
        plain_launch(1024, 3072)


@pytest.mark.parametrize("bad", [-1, 101, 50.5])
def test_launch_carveout_is_a_percent(bad):
    with pytest.raises(LaunchConfigError, match=r"carveout .* is not a percent 0\.\.100"):
        Program("p").launch("copy_f32", 1, 32, [Ref("a"), Ref("b"), 1], carveout=bad)

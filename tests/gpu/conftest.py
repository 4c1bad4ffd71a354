"""GPU tests: skipped, with the reason, where no usable NVIDIA GPU is present."""
import pytest

from fixedgraph.errors import NoDevice

_device = None
_reason = None


def cuda_device():
    global _device, _reason
    if _device is None and _reason is None:
        try:
            from fixedgraph.backends.cuda import CudaDevice

            _device = CudaDevice(0)
        except NoDevice as exc:
            _reason = f"no GPU: {exc}"
        except ImportError as exc:
            _reason = f"CUDA runtime extension not built: {exc}"
    if _device is None:
        pytest.skip(_reason)
    return _device


@pytest.fixture
def cuda():
    return cuda_device()

"""Kernel cases of silu_mul (ptx/src/act.cu)."""
from __future__ import annotations

import numpy as np

from fixedgraph import bf16
from fixedgraph.ops import act as ops
from fixedgraph.program import Program, Ref
from tests.kernel_cases import Buffer, Check, KernelCase, kernel_case, poison


def _rb(x: np.ndarray) -> np.ndarray:
    return bf16.round_f32(np.asarray(x, dtype=np.float32)).astype(np.float64)


def _case(name: str, rows: int, I: int):
    @kernel_case(name)
    def make(rng: np.random.Generator) -> KernelCase:
        gu = rng.standard_normal((rows, 2 * I)) * 3.0
        # saturated and zero gates: exp(-g) overflows for g < -88, silu(0) = 0
        edge = [-200.0, -90.0, -20.0, 0.0, 20.0, 90.0]
        gu[0, : min(I, len(edge))] = edge[: min(I, len(edge))]
        prog = Program(name)
        ops.silu_mul(prog, Ref("out"), Ref("gate_up"), rows, I)

        def reference(v: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            x = v["gate_up"].astype(np.float64).reshape(rows, 2 * I)
            gate, up = x[:, :I], x[:, I:]
            act = _rb(gate / (1.0 + np.exp(-gate)))
            return {"out": _rb(act * up)}

        # one bf16 rounding flip of the activation, then the product's rounding: ~2 ulps
        return KernelCase(name, prog,
                          {"out": poison((rows, I), "bf16"),
                           "gate_up": Buffer(bf16.from_f32(gu), "bf16")},
                          {"out": Check(atol=1e-6, rtol=2e-2)}, reference)

    return make


_case("silu_mul_1x12288", 1, 12288)
_case("silu_mul_3x1536", 3, 1536)
_case("silu_mul_8x1000", 8, 1000)
_case("silu_mul_33x100_tail", 33, 100)  # 100 % 8 != 0: element path
_case("silu_mul_2x17_odd", 2, 17)
_case("silu_mul_4x9000", 4, 9000)  # several column blocks per row

"""Every kernel case on the GPU, eager and as a graph, against its numpy twin and its formula."""
import pytest

from fixedgraph.backends.reference import ReferenceDevice
from tests.kernel_cases import compare, inputs_of, load_all, run_case

CASES = load_all()


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@pytest.mark.parametrize("name", sorted(CASES))
def test_kernel_matches_twin(name, graph, cuda, rng):
    case = CASES[name](rng)
    gpu = run_case(case, cuda, graph=graph)
    ref = run_case(case, ReferenceDevice())
    expected = case.reference(inputs_of(case)) if case.reference else None
    problems = []
    for out, check in case.outputs.items():
        if (p := compare(f"{out} (gpu vs twin)", gpu[out], ref[out], check)):
            problems.append(p)
        if expected is not None and (p := compare(f"{out} (gpu vs formula)", gpu[out], expected[out], check)):
            problems.append(p)
    assert not problems, "\n".join(problems)

"""Every kernel case on the reference backend against its independent float64 formula."""
import pytest

from tests.kernel_cases import compare, inputs_of, load_all, run_case
from fixedgraph.backends.reference import ReferenceDevice

CASES = load_all()


@pytest.mark.parametrize("name", sorted(CASES))
def test_twin_matches_reference_formula(name, rng):
    case = CASES[name](rng)
    if case.reference is None:
        pytest.skip(f"{name} has no independent formula")
    out = run_case(case, ReferenceDevice())
    expected = case.reference(inputs_of(case))
    problems = [p for n, c in case.outputs.items() if (p := compare(n, out[n], expected[n], c))]
    assert not problems, "\n".join(problems)

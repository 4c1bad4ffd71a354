"""fixedgraph.timeline.capture end to end on the reference backend (synthetic CTA times): every
launch of a real decode program gets its CTAs' records, in program order."""
import json

import pytest

from fixedgraph import timeline
from fixedgraph.backends.base import BoundLaunch
from fixedgraph.sampling import SamplingParams


def test_capture_accounts_for_every_launch_of_a_decode_step():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from fixedgraph.testing.checkpoints import random_llm

    llm = random_llm("tiny-qwen3", 2, "reference", 128, prefill_chunk=32)
    records, launches = timeline.capture(llm, context=40, warmup=1)
    graph = llm.runner.decode_graph(41)
    kernels = [op for op in graph.bound.ops if isinstance(op, BoundLaunch)]
    assert [e for _, _, e, _ in launches] == [op.entry.name for op in kernels]
    assert len(records) == sum(c for *_, c in launches)
    times = timeline.launch_times(records, launches)
    assert all(t.release_us > 0 and t.step_us > 0 for t in times[1:])  # synthetic: serial launches
    assert [t.index for t in times] == [i for i, *_ in launches]
    attention = [op.entry.name for op in kernels if op.entry.name.startswith("paged_attention_decode_rope")]
    assert attention and attention[0] in timeline.table(times)  # _swp_d128 by default (G = 2)
    assert json.loads(timeline.chrome_trace(records, launches))["traceEvents"]
    # recording is off again, and the engine still generates
    assert llm.device._trace is None
    out = llm.generate([[1, 2, 3]], SamplingParams(temperature=0, max_tokens=3, ignore_eos=True))[0]
    assert len(out.token_ids) == 3

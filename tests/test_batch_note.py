"""Issue 33 item 1: a global batch that some data-parallel degrees do not divide is said, not silent.

``plan --preset pi0 --gpus 16 --global-batch 500`` made the best plan a 4-stage pipeline (dp could only
be 1, 2 or 4) without a word; 512 gives pp = 1. The search now notes which degrees the batch allowed,
which it ruled out and the nearest batches every degree divides (``SearchResult.notes``, shown under
the plan table and in ``--json``).
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from _planner_models import gpt_workload, make_cluster
from pipeplan.planner import SearchOptions, search
from pipeplan.planner.advice import batch_note
from pipeplan.planner.space import SearchSpace
from pipeplan.viz.plans import plan_legend


def _space(gpus: int, batch: int, micro: int | None = None) -> SearchSpace:
    return SearchSpace(num_gpus=gpus, num_layers=8, global_batch=batch, micro_batch_size=micro)


def test_a_batch_that_rules_out_degrees_is_noted_in_the_result_json_and_legend():
    workload, cluster = gpt_workload(num_layers=4, hidden=256, heads=4, seq=256), make_cluster(4, 8e9)
    result = search(workload, cluster, 6, SearchOptions(budget=5))
    assert result.notes == ("global batch 6 splits over data-parallel degrees 1, 2 only: dp 4 (which these GPUs "
                            "allow) were not tried; global batch 4 or 8 would allow every degree",)
    assert result.to_dict()["notes"] == list(result.notes)
    assert all(plan.dp in (1, 2) for plan in result.plans)
    assert f"note: {result.notes[0]}" in plan_legend(result)
    even = search(workload, cluster, 8, SearchOptions(budget=5))
    assert even.notes == () and "notes" not in even.to_dict()  # nothing to say: no key (outputs unchanged)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([2, 4, 6, 8, 12, 16]), st.integers(1, 600), st.sampled_from([None, 1, 2]))
def test_the_note_appears_exactly_when_a_degree_is_ruled_out_and_its_batches_allow_them_all(gpus, batch, micro):
    space = _space(gpus, batch, micro)
    degrees = {gpus // (tp * pp) for tp in space.tensor_degrees() for pp in space.pipeline_degrees(tp)}
    ruled_out = {dp for dp in degrees if not space.micro_batches_for(dp)}
    note = batch_note(space)
    assert bool(note) == bool(ruled_out)
    if note:
        tail = note.split("; ")[-1]
        suggested = [int(word) for word in tail.split("global batch ")[-1].split(" would")[0].split(" or ")]
        lower, upper = (suggested if len(suggested) == 2 else [0, suggested[0]])
        assert lower < batch < upper

        def allows_all(value: int) -> bool:
            return all(_space(gpus, value, micro).micro_batches_for(dp) for dp in degrees)

        assert all(allows_all(value) for value in suggested)
        assert not any(allows_all(value) for value in range(lower + 1, upper))  # the nearest ones

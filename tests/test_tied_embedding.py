"""A tied embedding and LM head: one table per rank that holds either, counted once in a model's size.

Megatron-LM (megatron/core/models/common/language_module/language_module.py,
``setup_embeddings_and_output_layer``, commit d98e8a6) shares one weight when
pipeline parallel is 1 and otherwise keeps a copy of the word embeddings on the
last stage, whose gradient is all-reduced with the first stage's in the embedding
group (megatron/core/distributed/finalize_model_grads.py,
``_allreduce_word_embedding_grads``): two ranks hold it with gradients and
optimizer state, one rank holds it once.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import hardware, presets
from pipeplan.cli._spec_args import human_count
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.models.layer_costs import layer_costs, layer_profile
from pipeplan.partition.memory import RankMemoryModel, memory_prefixes, tied_layers
from pipeplan.partition.problem import MinMaxProblem
from pipeplan.planner.memory import MemoryModel
from pipeplan.planner.space import Config
from pipeplan.planner.workload import Workload

SPEC = presets.get("gpt-1.5b")
DEVICE = hardware.device("a100-80g")
PROFILE = layer_profile(SPEC, DEVICE, 1)
TABLE = 50_304 * 2304  # the word embeddings the output layer shares (gpt-1.5b's vocabulary × hidden)
LAST = PROFILE.num_layers - 1


def _static(sizes: list[int], placement: list[int]):
    memory = MemoryModel(Workload.from_spec(SPEC, DEVICE), "adam", None)
    config = Config(pp=max(placement) + 1, dp=1, micro_batch_size=1, num_microbatches=8, schedule="1f1b")
    return memory.static_memory(config, sizes, placement)


def test_the_profile_ties_the_head_to_the_embedding():
    assert PROFILE.names[0] == "embedding.0" and PROFILE.names[LAST] == "output_layer.0"
    assert PROFILE.tied_to[LAST] == 0 and PROFILE.tied_groups == ((0, LAST),)
    assert layer_costs(SPEC, 1)[LAST].tied_to == "embedding.0"
    assert PROFILE.params[LAST] == TABLE  # the copy the last stage holds
    assert sum(PROFILE.params) == SPEC.num_parameters() + TABLE
    assert PROFILE.held_params() == (SPEC.num_parameters(), SPEC.trainable_parameters())


def test_pp1_charges_the_spec_parameter_count():
    (rank,) = _static([PROFILE.num_layers], [0])
    assert rank.parameters == 2 * SPEC.num_parameters()  # bf16 weights: 1.52B, not 1.636B
    assert rank.gradients == 2 * SPEC.num_parameters()
    assert rank.optimizer == 12 * SPEC.num_parameters()


def test_pp2_both_ranks_carry_the_table():
    first, last = _static([12, 12], [0, 1])
    assert first.parameters / 2 == sum(PROFILE.params[:12])
    assert last.parameters / 2 == sum(PROFILE.params[12:])
    assert last.parameters / 2 >= TABLE and last.optimizer / 12 >= TABLE  # the copy trains on the last rank
    assert (first.parameters + last.parameters) / 2 == SPEC.num_parameters() + TABLE


def test_a_v_shape_holds_the_table_once_on_rank_0():
    ranks = _static([6, 6, 6, 6], [0, 1, 1, 0])
    assert sum(rank.parameters for rank in ranks) / 2 == SPEC.num_parameters()
    assert ranks[0].parameters / 2 == sum(PROFILE.params[:6]) + sum(PROFILE.params[18:]) - TABLE


def test_static_bound_counts_the_table_once():
    memory = MemoryModel(Workload.from_spec(SPEC, DEVICE), "adam", None)
    config = Config(pp=1, dp=1, micro_batch_size=1, num_microbatches=8, schedule="1f1b")
    assert memory.static_bound(config) == pytest.approx(16 * SPEC.num_parameters(), rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_rank_params_add_up_to_the_model_plus_a_copy_apart(data):
    stages = data.draw(st.integers(1, 8))
    cuts = sorted(data.draw(st.sets(st.integers(1, LAST), min_size=stages - 1, max_size=stages - 1)))
    bounds = [0, *cuts, PROFILE.num_layers]
    sizes = [b - a for a, b in zip(bounds[:-1], bounds[1:])]
    placement = data.draw(st.lists(st.integers(0, 3), min_size=stages, max_size=stages))
    static = _static(sizes, placement)
    apart = placement[0] != placement[-1]
    expected = SPEC.num_parameters() + (TABLE if apart else 0)
    assert sum(rank.parameters for rank in static) / 2 == pytest.approx(expected, rel=1e-12)
    # the partitioner's per-rank bytes (1 byte a parameter, no activations) agree
    params = np.asarray(PROFILE.params)
    tied = tied_layers(PROFILE, 1.0)
    problem = MinMaxProblem(memory_prefixes(params, np.zeros(len(params)), 1.0, [1] * stages, tied=tied),
                            np.zeros(stages))
    model = RankMemoryModel(problem, tuple(placement), "1f1b", 8, 1.0, tied=tied)
    assert model.rank_memory(bounds) == pytest.approx([rank.parameters / 2 for rank in static], rel=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.data())
def test_partitioner_per_rank_bytes_never_undercount(data):
    """Any tied layers: the partitioner's rank bytes are at least what the rank holds, exact on fixed stages."""
    count = data.draw(st.integers(3, 9))
    params = data.draw(st.lists(st.integers(1, 50), min_size=count, max_size=count))
    target, sharer = sorted(data.draw(st.sets(st.integers(0, count - 1), min_size=2, max_size=2)))
    params[sharer] = min(params[sharer], params[target])
    tied_to = [-1] * count
    tied_to[sharer] = target
    profile = LayerProfile([1.0] * count, params=params, tied_to=tied_to)
    stages = data.draw(st.integers(1, count))
    placement = tuple(data.draw(st.lists(st.integers(0, 2), min_size=stages, max_size=stages)))
    tied = tied_layers(profile, 2.0)
    problem = MinMaxProblem(memory_prefixes(np.asarray(params, float), np.zeros(count), 2.0, [1] * stages,
                                            tied=tied), np.zeros(stages))
    model = RankMemoryModel(problem, placement, "1f1b", 4, 2.0, tied=tied)
    largest = []
    for bounds in _every_bounds(count, stages):
        held = [[i for k, r in enumerate(placement) if r == rank for i in range(bounds[k], bounds[k + 1])]
                for rank in range(max(placement) + 1)]
        truth = [2.0 * profile.held_params(layers)[0] for layers in held]
        charged = model.rank_memory(bounds)
        assert all(c >= t - 1e-9 for c, t in zip(charged, truth))
        if stages == 1 or (target == 0 and sharer == count - 1):
            assert charged == pytest.approx(truth)
        largest.append(max(charged))
    listed = model.smallest_listed()  # the exhaustive listing charges the ranks the same way
    assert listed is not None and listed[0] == pytest.approx(min(largest))


def _every_bounds(count: int, stages: int) -> list[list[int]]:
    from itertools import combinations
    return [[0, *cuts, count] for cuts in combinations(range(1, count), stages - 1)]


@pytest.mark.parametrize("suffix", ["csv", "json"])
def test_files_keep_tied_to(tmp_path, suffix):
    path = tmp_path / f"gpt.{suffix}"
    PROFILE.to_file(path)
    again = LayerProfile.from_file(path)
    assert again == PROFILE and again.tied_to[LAST] == 0


def test_a_file_without_the_column_has_no_ties(tmp_path):
    path = tmp_path / "old.csv"
    path.write_text("forward,params\n1,10\n2,5\n")
    profile = LayerProfile.from_file(path)
    assert profile.tied_to == (-1, -1) and profile.held_params() == (15.0, 15.0)
    assert "tied_to" not in profile.to_records()[0]


@pytest.mark.parametrize("tied_to,match", [
    ([-1, 2, -1], r"tied_to\[1\] must be -1 \(none\) or an earlier layer's index, got 2"),
    ([-1, -1, 2], r"tied_to\[2\] must be -1 \(none\) or an earlier layer's index, got 2"),
    ([-1, -1, -3], r"got -3"),
    ([-1, 0.5, -1], r"got 0.5"),
    ([-1, True, -1], r"got True"),
    ([-1, "x", -1], r"got 'x'"),
    ([-1, -1], r"tied_to must be 3 layer indices"),
    ([-1, 0, 0], r"tied_to\[2\] = 0 must name an untied layer with at least its 8 params; layer 0 has 5"),
    ([-1, 0, 1], r"tied_to\[2\] = 1 must name an untied layer .* tied_to 0"),
])
def test_bad_tied_to_is_one_clear_error(tied_to, match):
    with pytest.raises(InvalidInputError, match=match):
        LayerProfile([1.0, 1.0, 1.0], params=[5, 5, 8], tied_to=tied_to)


def test_bad_tied_to_in_a_file_is_one_line_exit_2(run_cli, tmp_path):
    path = tmp_path / "bad.csv"
    path.write_text("forward,params,tied_to\n1,10,-1\n1,10,-1\n1,20,0\n")
    status, out, err = run_cli("partition", str(path), "--stages", "2")
    assert status == 2 and out == ""
    assert err.count("\n") == 1  # the file, the layer and the field (issue 24, item 1)
    assert f"profile file {str(path)!r}, layer 2 (layers.2): tied_to = 0 must name an untied layer with at least " \
           "its 20 params" in err


def test_model_table_prints_the_spec_count(run_cli):
    status, out, err = run_cli("model", "--preset", "gpt-1.5b", "--by-module")
    assert status == 0, err
    text = " ".join(out.split())
    assert f"{human_count(SPEC.num_parameters())} parameters" in text  # 1.52B
    assert human_count(sum(PROFILE.params)) not in text  # not 1.64B
    status, out, _ = run_cli("model", "--preset", "gpt-1.5b", "--json")
    assert json.loads(out)["layers"][LAST]["tied_to"] == 0

"""pipeplan.batches: the mix file, per-sample costs, balancing with its bound, the baselines, the pipeline step."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import hardware, presets
from pipeplan.batches import (balance, balance_exact, bucketed_batches, lower_bound, mix_costs, packing_split,
                              parse_mix, pipeline_makespan, plan_microbatches, random_split, read_mix)
from pipeplan.costs import StageCosts
from pipeplan.errors import InvalidInputError
from pipeplan.schedules import schedule_info
from pipeplan.simulate import simulate

costs_lists = st.lists(st.floats(min_value=0.0, max_value=100.0, allow_nan=False), min_size=1, max_size=60)


def _counts_equal(assignment: np.ndarray, samples: int, ranks: int) -> bool:
    counts = np.bincount(assignment, minlength=ranks)
    return len(counts) == ranks and counts.max() - counts.min() <= (0 if samples % ranks == 0 else 1) \
        and counts.sum() == samples


# ---------------------------------------------------------------- balancing

@settings(max_examples=150, deadline=None)
@given(costs_lists, st.integers(1, 12))
def test_balance_assigns_every_sample_once_in_equal_counts_within_its_guarantee(costs, ranks):
    values = np.array(costs)
    result = balance(values, ranks)
    assert result.assignment.shape == (len(costs),) and set(result.assignment) <= set(range(ranks))
    assert _counts_equal(result.assignment, len(costs), ranks)
    assert np.isclose(result.loads.sum(), values.sum())
    assert result.makespan >= lower_bound(values, ranks) - 1e-9
    # the stated guarantee: total/R + the largest cost range inside one round (max - min overall bounds it)
    slack = (values.max() - values.min()) if len(costs) % ranks == 0 else values.max()
    assert result.makespan <= values.sum() / ranks + slack + 1e-9


@settings(max_examples=80, deadline=None)
@given(st.lists(st.floats(min_value=0.5, max_value=20.0, allow_nan=False), min_size=2, max_size=10),
       st.integers(2, 4))
def test_heuristic_against_exact_on_small_cases(costs, ranks):
    values = np.array(costs)
    exact = balance_exact(values, ranks)
    heuristic = balance(values, ranks)
    assert _counts_equal(exact.assignment, len(costs), ranks)
    assert lower_bound(values, ranks) - 1e-9 <= exact.makespan <= heuristic.makespan + 1e-9
    slack = (values.max() - values.min()) if len(costs) % ranks == 0 else values.max()
    assert heuristic.makespan <= exact.makespan + slack + 1e-9


def test_exact_beats_a_plain_round_deal_and_heuristic_finds_the_same_here():
    costs = np.array([4.0, 1, 1, 2, 3, 1, 2, 2])
    assert balance_exact(costs, 2).makespan == 8.0 == lower_bound(costs, 2)
    assert balance(costs, 2).makespan == 8.0
    assert random_split(costs, 2, seed=1).makespan >= 8.0


def test_balancing_beats_random_on_a_camera_mix():
    rng = np.random.default_rng(3)
    costs = rng.choice([1.0, 2.0, 3.0, 4.0], size=512, p=[0.4, 0.3, 0.2, 0.1])
    balanced = balance(costs, 32).makespan
    random = np.mean([random_split(costs, 32, seed=s).makespan for s in range(5)])
    assert balanced <= lower_bound(costs, 32) + 1.0
    assert random > 1.1 * balanced


def test_bad_inputs_are_refused():
    with pytest.raises(InvalidInputError):
        balance([], 2)
    with pytest.raises(InvalidInputError):
        balance([1.0, -1.0], 2)
    with pytest.raises(InvalidInputError):
        balance([1.0], 0)
    with pytest.raises(InvalidInputError, match="at most"):
        balance_exact(np.ones(20), 2)


# ---------------------------------------------------------------- baselines

@settings(max_examples=60, deadline=None)
@given(costs_lists, st.integers(1, 8), st.integers(0, 5))
def test_baselines_assign_every_sample_once(costs, ranks, seed):
    values = np.array(costs)
    for result in (random_split(values, ranks, seed=seed), bucketed_batches(values, ranks)):
        assert _counts_equal(result.assignment, len(costs), ranks)
        assert np.isclose(result.loads.sum(), values.sum())
    packed = packing_split(values, ranks)
    assert np.bincount(packed.assignment, minlength=ranks).sum() == len(costs)
    assert np.isclose(packed.loads.sum(), values.sum())


def test_random_split_is_distributed_samplers_interleave():
    costs = np.arange(8.0)
    result = random_split(costs, 2, seed=0)
    order = np.random.default_rng(0).permutation(8)
    assert list(result.members(0)) == sorted(order[0::2]) and list(result.members(1)) == sorted(order[1::2])


def test_bucketing_puts_alike_samples_together_and_packing_respects_its_budget():
    costs = np.array([1.0, 4, 1, 4, 1, 4, 1, 4])
    bucketed = bucketed_batches(costs, 2)
    assert sorted(bucketed.loads) == [4.0, 16.0]  # it sorts: the cheap ones on one rank
    tokens = np.array([10.0, 40, 10, 40, 10, 40, 10, 40])
    packed = packing_split(costs, 2, tokens=tokens, capacity=100)
    used = np.bincount(packed.assignment, weights=tokens, minlength=2)
    assert used.max() <= 100 and packed.makespan == 10.0


# ---------------------------------------------------------------- pipeline step and microbatches

@settings(max_examples=25, deadline=None)
@given(st.integers(1, 5), st.integers(1, 12), st.sampled_from(["1f1b", "gpipe"]), st.integers(0, 1000))
def test_pipeline_makespan_equals_the_simulator_when_costs_scale_per_microbatch(stages, count, name, seed):
    rng = np.random.default_rng(seed)
    base = rng.uniform(0.5, 3.0, size=stages)
    scale = rng.uniform(0.25, 2.0, size=count)
    forward = np.outer(base, scale)
    ours = pipeline_makespan(forward, 2 * forward, schedule=name)
    schedule = schedule_info(name).factory(stages, count, backward="full")
    theirs = simulate(schedule, StageCosts(list(base), list(2 * base), microbatch_scale=list(scale))).makespan
    assert ours == pytest.approx(theirs, rel=1e-12)


def test_pipeline_makespan_sees_a_cost_on_one_stage_only():
    forward = np.ones((4, 8))
    heavy = forward.copy()
    assert pipeline_makespan(forward, 2 * forward) == (8 + 4 - 1) * 3  # (m + P - 1)(F + B)
    heavy[0, 0] = 5.0  # the first microbatch slow on the first stage only (more cameras through the vision encoder)
    assert pipeline_makespan(heavy, 2 * forward) == 33 + 4  # everything after it waits 4 more
    heavy[0, 0], heavy[0, 3] = 1.0, 5.0  # later in the steady state stage 0 has slack: 1F1B absorbs it
    assert pipeline_makespan(heavy, 2 * forward) == 33


def test_plan_microbatches_balances_and_keeps_every_sample():
    rng = np.random.default_rng(0)
    costs = rng.choice([1.0, 2.0, 3.0, 4.0], size=64)
    plan = plan_microbatches(costs, 8)
    assert sorted(i for group in plan.microbatches for i in group) == list(range(64))
    assert {len(group) for group in plan.microbatches} == {8}
    assert max(plan.costs) - min(plan.costs) <= costs.max() - costs.min()
    for group, cost in zip(plan.microbatches, plan.costs):
        assert cost == pytest.approx(costs[list(group)].sum())


# ---------------------------------------------------------------- the mix file

def _write(tmp_path, text, name="mix.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


def test_csv_and_json_mixes_read_alike(tmp_path):
    csv_mix = read_mix(_write(tmp_path, "cameras,count\n1,400\n2,300\n3,200\n4,100\n"))
    json_mix = read_mix(_write(tmp_path, json.dumps([{"cameras": c, "weight": w}
                                                     for c, w in ((1, 4), (2, 3), (3, 2), (4, 1))]), "mix.json"))
    assert csv_mix.shapes == json_mix.shapes and csv_mix.weights == pytest.approx(json_mix.weights)
    assert csv_mix.weights == pytest.approx((0.4, 0.3, 0.2, 0.1)) and csv_mix.counts == (400, 300, 200, 100)
    assert read_mix(_write(tmp_path, "Text-Tokens,weight\n48,1\n", "t.csv")).fields == ("text_tokens",)


@pytest.mark.parametrize("text, expected", [
    ("cameras,count\n", "no rows"),
    ("", "is empty"),
    ("cameras,count\n1,0\n", "row 1: count must be a positive integer"),
    ("cameras,count\n1,10\n2,-3\n", "row 2: count must be a positive integer"),
    ("cameras,weight\n1,abc\n", "row 1: weight must be a positive number"),
    ("cameras,count\n0,5\n", "row 1: cameras must be an integer in 1..64"),
    ("cameras,count\n1.5,5\n", "row 1: cameras must be an integer"),
    ("lidars,count\n1,5\n", "row 1: unknown field 'lidars'"),
    ("cameras\n1\n", "exactly one of count or weight"),
    ("cameras,count,weight\n1,1,1\n", "exactly one of count or weight"),
    ("cameras,count\n1,5\n1,6\n", "row 2: the same shape as row 1"),
    ("cameras,count\n1,5,7\n", "row 1: 3 values for 2 fields"),
    ("[1, 2]", "row 1: expected an object"),
    ("{\"shapes\": []}", "needs a \"rows\" list"),
    ("[{\"cameras\": 1, \"count\": 2}, {\"count\": 2}]", "row 2: field 'cameras' is not in every row"),
])
def test_bad_mix_files_fail_in_one_line_naming_file_row_and_field(tmp_path, text, expected):
    path = _write(tmp_path, text)
    with pytest.raises(InvalidInputError) as caught:
        read_mix(path)
    message = str(caught.value)
    assert expected in message and "\n" not in message and str(path) in message


def test_mix_costs_follow_the_camera_count_and_refuse_shapes_a_preset_cannot_take(tmp_path):
    mix = parse_mix([{"cameras": c, "count": 1} for c in (1, 2, 4)], source="m.csv")
    costs = mix_costs("pi0", mix, micro_batch_size=4)
    assert costs.sample_ms[0] < costs.sample_ms[1] < costs.sample_ms[2]
    assert costs.module_ms[0]["vision"] < costs.module_ms[2]["vision"]
    # the flat model (every FLOP at one rate): the vision encoder's cost is per image, so 4 cameras cost 4x one
    flat = mix_costs("pi0", mix, device=hardware.device("h100-80g", achievable_fraction=0.4))
    assert flat.module_ms[2]["vision"] == pytest.approx(4 * flat.module_ms[0]["vision"], rel=1e-9)
    assert flat.module_ms[2]["action_output"] == pytest.approx(flat.module_ms[0]["action_output"], rel=1e-9)
    one = mix_costs("pi0", parse_mix([{"cameras": 4, "count": 1}]), micro_batch_size=4)
    assert one.sample_ms[0] == pytest.approx(costs.sample_ms[2])
    assert costs.stage_ms([len(costs.profiles[0].forward)]).ravel() == pytest.approx(costs.sample_ms)
    assert "cameras" not in presets.options("gpt-1.5b")
    with pytest.raises(InvalidInputError, match="m.csv: field 'cameras' is not a shape option of preset 'gpt-1.5b'"):
        mix_costs("gpt-1.5b", mix)
    with pytest.raises(InvalidInputError, match="must be an integer in 1..64"):
        parse_mix([{"cameras": 65, "count": 1}])
    drawn = costs.draw(1000, seed=0)
    assert set(drawn) <= {0, 1, 2} and costs.costs_of(drawn).shape == (1000,)


# ---------------------------------------------------------------- the expected pipeline step over a mix, and --mix

def test_mix_pipeline_step_one_shape_is_the_mean_and_a_mix_is_bounded():
    from pipeplan.batches.pipeline import mix_pipeline_step

    one = mix_costs("pi0", parse_mix([{"cameras": 2, "count": 1}]), micro_batch_size=2)
    layers = [25, 25]
    step = mix_pipeline_step(one, layers, 4, 2, draws=3)
    assert step.random_mean_ms == pytest.approx(step.mean_sample_ms) == pytest.approx(step.balanced_mean_ms)
    forward, backward = one.stage_forward_backward(layers)
    assert step.mean_sample_ms == pytest.approx(pipeline_makespan(np.repeat(2 * forward.T, 4, axis=1),
                                                                  np.repeat(2 * backward.T, 4, axis=1)))
    mixed = mix_costs("pi0", parse_mix([{"cameras": c, "count": n} for c, n in ((1, 4), (4, 1))]), micro_batch_size=2)
    step = mix_pipeline_step(mixed, layers, 4, 2, draws=20)
    assert step.bound_mean_ms <= min(step.random_mean_ms, step.balanced_mean_ms)
    assert step.random_p95_ms >= step.random_mean_ms * 0.999


def test_simulate_mix_prints_the_expected_step_and_refuses_what_it_cannot_do(run_cli, tmp_path):
    mix = _write(tmp_path, "cameras,count\n1,4\n4,1\n")
    status, out, _ = run_cli("simulate", "--preset", "pi0", "--stages", "2", "-m", "4", "--mix", str(mix))
    assert status == 0 and f"--mix {mix}: step over 50 drawn batches" in out and "balanced" in out
    status, out, _ = run_cli("simulate", "--preset", "pi0", "--stages", "2", "-m", "4", "--mix", str(mix), "--json")
    assert status == 0 and set(json.loads(out)["mix"]) >= {"random_mean_ms", "balanced_p95_ms", "mean_sample_ms"}
    for argv, message in ((("--forward", "1,2"), "--mix applies to --preset"),
                          (("--preset", "pi0", "--stages", "2", "--schedule", "zb-h1"), "not --schedule zb-h1"),
                          (("--preset", "gpt-1.5b", "--stages", "2"), "not a shape option of preset 'gpt-1.5b'")):
        status, _, err = run_cli("simulate", *argv, "--mix", str(mix))
        assert status == 2 and message in err and len(err.strip().splitlines()) == 1
    bad = _write(tmp_path, "cameras,count\n1,-2\n", "bad.csv")
    status, _, err = run_cli("simulate", "--preset", "pi0", "--stages", "2", "--mix", str(bad))
    assert status == 2 and "bad.csv row 1: count must be a positive integer" in err



def test_simulate_mix_prices_the_model_as_simulated_frozen_and_reshaped(run_cli, tmp_path):
    # The mix's rows vary only their own fields: --freeze and the other shape flags stay as given.
    mix = _write(tmp_path, "cameras,count\n1,4\n4,1\n")
    base = ("simulate", "--preset", "pi0", "--stages", "2", "-m", "4", "--mix", str(mix), "--json")

    def mean_sample(*extra: str) -> float:
        status, out, err = run_cli(*base, *extra)
        assert status == 0, err
        return json.loads(out)["mix"]["mean_sample_ms"]

    plain = mean_sample()
    assert mean_sample("--freeze", "vision,llm") < plain  # frozen modules skip their weight gradients
    assert mean_sample("--text-tokens", "400") > plain    # longer prompts cost more in every row

def test_mix_pipeline_step_over_replicas_waits_for_the_slowest_and_balancing_helps():
    from pipeplan.batches.pipeline import mix_pipeline_step

    mixed = mix_costs("pi0", parse_mix([{"cameras": c, "count": n} for c, n in ((1, 4), (4, 1))]), micro_batch_size=2)
    one = mix_pipeline_step(mixed, [25, 25], 4, 2, draws=10, seed=1)
    many = mix_pipeline_step(mixed, [25, 25], 4, 2, replicas=16, draws=10, seed=1)
    assert many.mean_sample_ms == pytest.approx(one.mean_sample_ms)  # the mean sample does not see replicas
    assert many.random_mean_ms > one.random_mean_ms  # the slowest of 16 replicas
    assert many.bound_mean_ms <= many.balanced_mean_ms < many.random_mean_ms


# ---------------------------------------------------------------- one drawn batch, each microbatch at its own costs

def test_mix_batch_step_runs_the_balanced_order_of_the_same_samples_and_splits_the_idle():
    from pipeplan import CommModel, build_schedule
    from pipeplan.batches.pipeline import mix_batch_step

    mixed = mix_costs("pi0", parse_mix([{"cameras": c, "count": n} for c, n in ((1, 4), (4, 1))]), micro_batch_size=2)
    schedule = build_schedule("1f1b", num_stages=2, num_microbatches=4)
    batch = mix_batch_step(mixed, [25, 25], 4, 2, schedule=schedule, comm=CommModel(latency=0.1), seed=3)
    random, balanced = batch.random, batch.balanced
    assert sorted(sum(random.shapes, ())) == sorted(sum(balanced.shapes, ()))  # the same 8 samples
    assert random.costs.forward == pytest.approx(balanced.costs.forward)  # so the same mean costs
    assert random.split.mean_makespan == pytest.approx(balanced.split.mean_makespan)
    # the balanced order is plan_microbatches' on the drawn samples
    forward, backward = mixed.stage_forward_backward([25, 25])
    drawn = mixed.draw(8, seed=3)
    plan = plan_microbatches(forward[drawn].sum(axis=1) + backward[drawn].sum(axis=1), 4,
                             sample_forward=forward[drawn], sample_backward=backward[drawn], schedule=schedule)
    assert balanced.shapes == tuple(tuple(int(drawn[i]) for i in group) for group in plan.microbatches)
    for run in (random, balanced):
        assert run.split.lower_bound <= run.timeline.makespan + 1e-9 <= run.split.upper_bound + 2e-9  # tight: rounding
        assert run.timeline.makespan == run.split.makespan and min(run.split.variation) >= 0
        # microbatch 0's forward on stage 0 is the sum of its samples'
        assert run.costs.duration("F", 0, 0) == pytest.approx(forward[list(run.shapes[0]), 0].sum())
    # each microbatch's message across the cut is the sum of its samples' bytes (a 4-camera sample's are larger)
    sample_bytes = [profile.boundary_bytes([25, 25])[0] for profile in mixed.profiles]
    assert sample_bytes[1] > sample_bytes[0]
    assert random.comm.microbatch_bytes[0] == pytest.approx([sum(sample_bytes[i] for i in mb) for mb in random.shapes])
    assert mix_batch_step(mixed, [25, 25], 4, 2, comm=CommModel(latency=0.1), message_bytes=False).random.comm \
        == CommModel(latency=0.1)
    one = mix_costs("pi0", parse_mix([{"cameras": 2, "count": 1}]), micro_batch_size=2)
    alike = mix_batch_step(one, [25, 25], 4, 2)
    assert alike.random.split.variation == alike.balanced.split.variation == (0.0, 0.0)


def test_simulate_mix_names_the_idle_from_variation_beside_the_bubble(run_cli, tmp_path):
    mix = _write(tmp_path, "cameras,count\n1,4\n4,1\n")
    base = ("simulate", "--preset", "pi0", "--stages", "2", "-m", "4", "--mix", str(mix))
    status, out, _ = run_cli(*base)
    assert status == 0 and "one drawn batch (seed 0), each microbatch at its own costs" in out
    assert "rank │ random bubble │ random variation │ balanced bubble │ balanced variation" in out
    status, out, _ = run_cli(*base, "--json")
    batch = json.loads(out)["mix"]["batch"]
    for name in ("random", "balanced"):
        run = batch[name]
        assert len(run["microbatch_shapes"]) == 4 and len(run["ranks"]) == 2
        assert run["lower_bound"] <= run["makespan"] + 1e-9 <= run["upper_bound"] + 2e-9
        for rank in run["ranks"]:
            assert rank["bubble"] + rank["variation"] == pytest.approx(rank["idle"]) and rank["variation"] >= 0

"""``plan --mix``: plans re-ranked by the expected step over batches drawn from a shape mix.

The library (:mod:`pipeplan.planner.mix_rank`) on small pi0 searches (8 H100s, a global batch
of 64, one-stage-per-rank pp = 1 plans and pipelines), the split-backward makespan it relies
on against the simulator, and the CLI's refusals and ``--json`` key.
"""

from __future__ import annotations

import json
from functools import lru_cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import hardware, presets
from pipeplan.batches import balance, parse_mix, pipeline_makespan, read_mix
from pipeplan.costs import StageCosts
from pipeplan.planner import Cluster, SearchOptions, Workload, search
from pipeplan.planner.mix_rank import DP_REFINE, MixCandidate, rank_on_mix
from pipeplan.schedules import build_schedule
from pipeplan.simulate import simulate

DEVICE = hardware.device("h100-80g")
CLUSTER = Cluster.of("h100-80g", 8)
BATCH = 64


@lru_cache(maxsize=None)
def _workload(**shape: int) -> Workload:
    return Workload.from_spec(presets.get("pi0", **shape), DEVICE, tp_link=CLUSTER.intra_node)


@lru_cache(maxsize=None)
def _plans(pp: int, tp: int | None = None, cameras: int = 3) -> tuple:
    options = SearchOptions(pp=pp, tp=tp, top=3, dp_modes=("zero2",), sync="megatron-overlap")
    return search(_workload(cameras=cameras), CLUSTER, BATCH, options).plans


def _rank(plans, rows, cameras: int = 3, draws: int = 16, **extra):
    mix = parse_mix(rows)
    shaped = [_workload(**{"cameras": cameras, **shape}) for shape in mix.shapes]
    candidates = [MixCandidate(f"plan {index}", plan, index) for index, plan in enumerate(plans, start=1)]
    return rank_on_mix(candidates, mix, shaped, _workload(cameras=cameras), global_batch=BATCH, draws=draws, **extra)


def test_ranks_are_by_the_expected_step_and_it_is_the_slowest_replicas_balanced_load():
    plans = _plans(1) + _plans(2)
    ranking = _rank(plans, [{"cameras": 1, "count": 4}, {"cameras": 4, "count": 1}])
    ranked = [row for row in ranking.rows if row.rank is not None]
    assert [row.rank for row in ranked] == list(range(1, len(plans) + 1))
    assert [row.expected_ms for row in ranked] == sorted(row.expected_ms for row in ranked)
    for row in ranked:
        assert row.p95_ms >= row.expected_ms * (1 - 1e-12) and row.random_ms >= row.expected_ms * (1 - 1e-3)
    # pp = 1: the step on a batch is the plan's rest plus the most loaded replica's work, whatever the microbatches
    one = next(row for row in ranked if row.plan.pp == 1 and row.plan.dp > 1)
    plan = one.plan
    b = plan.micro_batch_size
    cost = [(_workload(cameras=c).with_tensor_parallel(plan.tp).profile(b, plan.recompute[0])) for c in (1, 4, 3)]
    per_sample = np.array([(sum(p.forward) + sum(p.backward)) / b for p in cost])
    rest = plan.step_time - per_sample[2] * b * plan.num_microbatches
    rng = np.random.default_rng(0)
    steps = []
    for _ in range(one.draws):
        drawn = rng.choice(2, size=BATCH, p=[0.8, 0.2])
        steps.append(rest + balance(per_sample[drawn], plan.dp, refine=DP_REFINE).makespan)
    assert one.expected_ms == pytest.approx(float(np.mean(steps)), rel=1e-9)
    assert one.p95_ms == pytest.approx(float(np.percentile(steps, 95)), rel=1e-9)


@pytest.mark.parametrize("priced", [False, True])
def test_a_mix_of_the_planned_shape_gives_back_the_planned_step_for_every_schedule(priced):
    # priced: the messages between stages priced per microbatch (the search's links and send mode)
    plans = _plans(1) + _plans(2) + _plans(4)
    assert {plan.schedule for plan in plans} - {"1f1b"}  # pipelines (interleaved, zero-bubble) among them
    ranking = _rank(plans, [{"cameras": 3, "count": 1}], draws=4, **({"cluster": CLUSTER} if priced else {}))
    for row in ranking.rows:
        assert row.re_ranked, row.note
        for value in (row.mean_sample_ms, row.expected_ms, row.p95_ms, row.random_ms):
            assert value == pytest.approx(row.planned_ms, rel=1e-9)
    # the ranking is then the search's
    assert [row.planned_rank for row in ranking.rows] == sorted(row.planned_rank for row in ranking.rows)


def test_a_mix_of_one_camera_is_its_mean_sample_and_close_to_planning_at_one_camera_for_pp_1():
    plans = _plans(1)
    ranking = _rank(plans, [{"cameras": 1, "count": 10}], draws=4)
    at_one = {(p.tp, p.dp, p.micro_batch_size): p.step_time for p in _plans(1, cameras=1)}
    compared = 0
    for row in ranking.rows:
        assert row.expected_ms == pytest.approx(row.mean_sample_ms, rel=1e-9)
        assert row.expected_ms < row.planned_ms  # one camera costs less than the planned three
        key = (row.plan.tp, row.plan.dp, row.plan.micro_batch_size)
        if key in at_one:  # the same layout planned at one camera: only the rest of the step could differ, and
            # zero2 with --overlap-grad-reduce exposes its last bucket only, which no compute time changes
            assert row.mean_sample_ms == pytest.approx(at_one[key], rel=1e-9)
            compared += 1
    assert compared


def test_a_heavy_tailed_mix_reorders_plans_that_the_mean_sample_ranks_the_other_way():
    # planned at one camera, 1 sample in 20 has four: eight replicas of 8 samples feel a 4-camera sample more
    # than two replicas of 32 do, although their mean-sample steps rank them the other way round
    wide = _plans(1, tp=1, cameras=1)[0]
    tall = _plans(1, tp=4, cameras=1)[0]
    assert (wide.dp, tall.dp) == (8, 2) and wide.step_time < tall.step_time
    ranking = _rank([wide, tall], [{"cameras": 1, "count": 95}, {"cameras": 4, "count": 5}], cameras=1, draws=32)
    by_plan = {row.planned_rank: row for row in ranking.rows}
    assert by_plan[1].mean_sample_ms < by_plan[2].mean_sample_ms
    assert by_plan[1].expected_ms > by_plan[2].expected_ms
    assert ranking.best is by_plan[2] and ranking.best_changed
    from pipeplan.cli._plan_mix import mix_lines

    assert any(line.startswith("best plan changes on the mix: plan 2 (4×1×2") for line in mix_lines(ranking, BATCH))


def test_a_schedule_with_updates_is_kept_and_marked_not_re_ranked():
    plan = _plans(1)[0]
    schedule = build_schedule("dual-rate", num_stages=2, num_microbatches=4)
    timeline = simulate(schedule, StageCosts([1.0, 1.0]))
    from dataclasses import replace

    odd = replace(plan, timeline=timeline)
    ranking = _rank([plan, odd], [{"cameras": 1, "count": 1}, {"cameras": 2, "count": 1}], draws=2)
    marked = next(row for row in ranking.rows if row.planned_rank == 2)
    assert marked.rank is None and marked.expected_ms is None and "not re-ranked" in marked.note and "U" in marked.note
    assert ranking.rows[-1] is marked  # after the ranked ones


@settings(max_examples=20, deadline=None)
@given(st.sampled_from([("zb-h1", {}), ("zb-v", {}), ("interleaved", {"virtual_stages": 2})]),
       st.integers(2, 4), st.integers(1, 8), st.integers(0, 1000))
def test_split_backward_makespan_equals_the_simulator_when_costs_scale_per_microbatch(named, ranks, count, seed):
    name, options = named
    stages = ranks * (2 if name in ("zb-v", "interleaved") else 1)
    if name == "interleaved":
        count = ranks * max(1, count // ranks)  # interleaved wants whole rounds of microbatches
    schedule = build_schedule(name, num_stages=stages, num_microbatches=count, **options)
    assert (schedule.num_stages, schedule.num_ranks) == (stages, ranks)
    rng = np.random.default_rng(seed)
    forward = rng.uniform(0.5, 3.0, size=stages)
    backward = 2 * forward
    weight = rng.uniform(0.2, 0.8, size=stages) * backward
    scale = rng.uniform(0.25, 2.0, size=count)
    ours = pipeline_makespan(np.outer(forward, scale), np.outer(backward, scale), weight=np.outer(weight, scale),
                             schedule=schedule)
    costs = StageCosts(list(forward), list(backward), list(weight), microbatch_scale=list(scale))
    assert ours == pytest.approx(simulate(schedule, costs).makespan, rel=1e-12)


# ---------------------------------------------------------------- the CLI

def _argv(*extra: str) -> list[str]:
    return ["plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "1", "--dp-modes", "zero2",
            "--top", "4", *extra]


def test_cli_prints_the_mix_table_and_json_has_a_mix_key(run_cli):
    status, out, err = run_cli(*_argv("--mix", "examples/mix_heavy_tail.csv"))
    assert status == 0, err
    assert "on the mix examples/mix_heavy_tail.csv" in out and "expected" in out and "random split" in out
    assert "best plan changes on the mix: plan 2 (2×1×4" in out
    status, out, err = run_cli(*_argv("--mix", "examples/mix_heavy_tail.csv", "--json"))
    assert status == 0, err
    payload = json.loads(out)
    mix = payload["mix"]
    assert mix["best_changed"] is True and mix["best_planned_rank"] == 2
    assert [shape["cameras"] for shape in mix["shapes"]] == [1, 4]
    plans = [row for row in mix["rows"] if row["planned_rank"] is not None]
    assert any(row["planned_rank"] == 1 and row["re_ranked"] for row in plans)  # plan 1 is always timed
    for row in plans:  # the planned step is the table's
        assert row["planned_ms"] == payload["plans"][row["planned_rank"] - 1]["step_time"]
    searched = [row for row in mix["rows"] if row["planned_rank"] is not None or row["mean_rank"] is not None]
    timed = [row for row in searched if row["re_ranked"]]
    assert [row["expected_ms"] for row in timed] == sorted(row["expected_ms"] for row in timed)
    assert len(timed) == mix["plans_timed"] and len(searched) - len(timed) == mix["plans_bounded"]
    best = min(row["expected_ms"] for row in timed)
    assert all(row["bound_ms"] >= best for row in searched if not row["re_ranked"])  # what the stopping rule says
    assert mix["exact"] and mix["plans_listed"] >= 4
    status, out, _ = run_cli(*_argv("--json"))
    assert status == 0 and "mix" not in json.loads(out)


@pytest.mark.parametrize("recompute", ["full", "block:1"])
def test_a_pinned_recompute_plans_on_the_mix(run_cli, recompute):
    # a pinned mode leaves the others out of each shape's workload, while the memory model asks for
    # `none` (a recomputed layer's transient) and block:N is priced per stage: both reach the mean sample
    argv = ["plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "2", "--top", "2",
            "--engine", "megatron", "--recompute", recompute, "--mix", "examples/mix_cameras.csv", "--json"]
    status, out, err = run_cli(*argv)
    assert status == 0, err
    payload = json.loads(out)
    timed = [row for row in payload["mix"]["rows"] if row["re_ranked"]]
    assert timed and all(row["bound_ms"] <= row["expected_ms"] for row in timed)


def test_cli_refuses_a_bad_mix_and_a_model_it_cannot_vary_in_one_line(run_cli, tmp_path):
    def write(name: str, text: str) -> str:
        path = tmp_path / name
        path.write_text(text)
        return str(path)

    cases = [
        (_argv("--mix", write("empty.csv", "cameras,count\n")), "but no rows"),
        (_argv("--mix", write("zero.csv", "cameras,count\n1,0\n")), "row 1: count must be a positive integer"),
        (_argv("--mix", str(tmp_path / "missing.csv")), "does not exist"),
        (_argv("--mix", write("field.csv", "lidar,count\n1,3\n")), "unknown field 'lidar'"),
        (["plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "64", "--mix",
          write("cams.csv", "cameras,count\n1,3\n")], "field 'cameras' is not a shape option of preset 'gpt-1.5b'"),
        (["plan", "--preset", "pi0-fast", "--gpus", "8", "--global-batch", "64", "--mix",
          write("tokens.csv", "text_tokens,count\n1,3\n")], "row 1 (text_tokens=1): --text-tokens"),
        (["plan", "--spec", "examples/gpt-6.2b.json", "--gpus", "8", "--global-batch", "64", "--mix",
          "examples/mix_cameras.csv"], "field 'cameras' is not a shape of spec examples/gpt-6.2b.json "
                                       "(no vision_encoder module); its shape fields: text_tokens"),
    ]
    cases.append((["plan", "--profile", str(tmp_path / "never-read.csv"), "--gpus", "2", "--global-batch", "8", "--mix",
                   "examples/mix_cameras.csv"], "a --profile holds layer times measured at one sample shape, not at "
                                                "the mix's (cameras=1, cameras=2, cameras=3, cameras=4)"))
    for argv, message in cases:
        status, out, err = run_cli(*argv)
        assert status == 2, (argv, out, err)
        lines = err.strip().splitlines()
        assert len(lines) == 1 and message in lines[0], (argv, err)
        assert "Traceback" not in err


def test_example_mix_files_read():
    assert len(read_mix("examples/mix_heavy_tail.csv").shapes) == 2


def test_export_plot_and_trace_follow_the_mix_best_plan_and_say_so(run_cli, tmp_path):
    # The heavy-tailed mix moves plan 4 (tp 2) ahead of plan 1: the export is written for it, the
    # plot and trace draw it, and the text says which plan each is; a mix at the planned shape
    # (3 cameras, the preset's default) changes nothing.
    plot, trace = tmp_path / "p.svg", tmp_path / "t.json"
    status, out, err = run_cli(*_argv("--mix", "examples/mix_heavy_tail.csv", "--export", "deepspeed", "--json"))
    assert status == 0, err
    payload = json.loads(out)
    best = next(row for row in payload["mix"]["rows"] if row["rank"] == 1)
    assert payload["mix"]["best_changed"] and best["planned_rank"] != 1
    export = payload["export"]
    assert export["on_mix"] and export["plan_index"] == best["planned_rank"] - 1
    assert f"is plan {best['planned_rank']}" in export["why"]
    assert (export["plan"]["tp"], export["plan"]["dp"]) == (best["plan"]["tp"], best["plan"]["dp"])
    assert payload["mix"]["outputs_plan"] == best["planned_rank"]
    status, out, err = run_cli(*_argv("--mix", "examples/mix_heavy_tail.csv", "--export", "deepspeed",
                                      "--plot", str(plot), "--trace", str(trace)))
    assert status == 0, err
    assert plot.exists() and trace.exists()
    assert f"deepspeed is written for plan {best['planned_rank']} (on the mix)" in out
    assert f"--plot and --trace: plan {best['planned_rank']}, the fastest on the mix" in out
    planned = tmp_path / "planned.csv"
    planned.write_text("cameras,count\n3,10\n")
    status, out, err = run_cli(*_argv("--mix", str(planned), "--export", "deepspeed", "--json"))
    assert status == 0, err
    payload = json.loads(out)
    assert not payload["mix"]["best_changed"]
    assert payload["export"]["plan_index"] == 0 and not payload["export"]["on_mix"]
    assert payload["mix"]["outputs_plan"] == 1


# ---------------------------------------------------------------- the search on the mix (branch and bound)

@settings(max_examples=12, deadline=None)
@given(weights=st.lists(st.integers(min_value=0, max_value=9), min_size=4, max_size=4).filter(lambda w: sum(w) > 0),
       draws=st.integers(min_value=1, max_value=12), seed=st.integers(min_value=0, max_value=2**16),
       priced=st.booleans())
def test_the_bound_never_exceeds_the_expected_step(weights, draws, seed, priced):
    # Random camera mixes, 1F1B, interleaved and zero-bubble pipelines and pp = 1 plans, messages
    # priced per microbatch or not: the bound (no drawn batch simulated) is at most the expected
    # step over the same drawn batches.
    mix = parse_mix([{"cameras": cameras, "count": count} for cameras, count in zip((1, 2, 3, 4), weights) if count])
    shaped = [_workload(**shape) for shape in mix.shapes]
    plans = _plans(1) + _plans(2) + _plans(4)
    candidates = [MixCandidate(f"plan {index}", plan, index) for index, plan in enumerate(plans, start=1)]
    ranking = rank_on_mix(candidates, mix, shaped, _workload(cameras=3), global_batch=BATCH, draws=draws, seed=seed,
                          cluster=CLUSTER if priced else None)
    rows = [row for row in ranking.plans if row.re_ranked]
    assert len(rows) == len(plans) and {row.plan.pp for row in rows} == {1, 2, 4}
    for row in rows:
        assert row.bound_ms is not None and row.bound_ms <= row.expected_ms * (1 + 1e-12), row.label


def test_the_mean_sample_step_is_not_a_lower_bound_of_the_expected_step():
    # Why the bound is not the mean-sample step (Jensen's): the expected step is a mean over a few
    # drawn batches, and each batch's split and order are chosen for it; on this mix some plans are
    # expected below their mean-sample step, none below the bound.
    mix = parse_mix([{"cameras": cameras, "count": count} for cameras, count in ((1, 4), (2, 3), (3, 2), (4, 1))])
    shaped = [_workload(**shape) for shape in mix.shapes]
    plans = _plans(1) + _plans(2)
    candidates = [MixCandidate(f"plan {index}", plan, index) for index, plan in enumerate(plans, start=1)]
    rows = rank_on_mix(candidates, mix, shaped, _workload(cameras=3), global_batch=BATCH, draws=8, seed=3).plans
    assert any(row.expected_ms < row.mean_sample_ms for row in rows)
    assert all(row.bound_ms <= row.expected_ms for row in rows)


def _on_mix(rows, top: int, batch: int, **extra):
    from pipeplan.planner.mix_search import search_on_mix

    mix = parse_mix([{"cameras": cameras, "count": count} for cameras, count in rows])
    options = SearchOptions(pp=1, top=top, dp_modes=("zero2",), sync="megatron-overlap")
    main = search(_workload(cameras=3), CLUSTER, batch, options)
    shaped = [_workload(**shape) for shape in mix.shapes]
    return main, search_on_mix(mix, shaped, CLUSTER, batch, options, main=main, draws=16, **extra)


def test_the_mix_best_can_lie_outside_the_plans_shown_and_be_no_mean_sample_best():
    # 90% one camera, 10% four, 64 samples on 8 GPUs: the search at 3 cameras shows one plan
    # (1×1×8); on the mix the best is a plan it does not show, and not the best at the mean sample
    # either (a replica of 16 samples absorbs a four-camera sample better); the list at the mean
    # sample doubled until the best expected step was below what any plan beyond it reaches.
    main, found = _on_mix(((1, 90), (4, 10)), top=1, batch=64)
    best = found.ranking.best
    assert len(main.plans) == 1 and best.planned_rank is None and best.mean_rank > 1
    assert found.searches > 1 and found.exact
    assert best.expected_ms < next(row for row in found.ranking.plans if row.mean_rank == 1).expected_ms
    first = next(row for row in found.ranking.plans if row.planned_rank == 1)
    assert best.expected_ms < first.expected_ms and found.ranking.best_changed
    assert (best.plan.tp, best.plan.dp) != (main.best.tp, main.best.dp)


def test_branch_and_bound_finds_the_best_of_timing_every_listed_plan():
    # The same list timed whole (no pruning): the same best plan and expected step, and fewer
    # plans timed by the bound.
    from pipeplan.planner.mix_search import mean_sample_workload

    main, found = _on_mix(((1, 97), (4, 3)), top=8, batch=32)
    mix = found.ranking.mix
    shaped = [_workload(**shape) for shape in mix.shapes]
    mean = mean_sample_workload(shaped, mix.weights)
    listed = search(mean, CLUSTER, 32, SearchOptions(pp=1, top=found.listed, dp_modes=("zero2",),
                                                     sync="megatron-overlap")).plans
    every = rank_on_mix([MixCandidate(f"mean {i}", plan, None, mean_rank=i) for i, plan in enumerate(listed, 1)],
                        mix, shaped, mean, global_batch=32, draws=16)
    assert every.best.expected_ms == pytest.approx(found.ranking.best.expected_ms, rel=1e-12)
    assert every.best.mean_rank == found.ranking.best.mean_rank
    assert found.ranking.timed < every.timed == len(listed)


def test_the_mean_sample_workload_is_the_mix_mean_of_times_and_the_largest_memory():
    from pipeplan.planner.mix_search import mean_sample_workload

    one, four = _workload(cameras=1), _workload(cameras=4)
    mean = mean_sample_workload([one, four], [0.75, 0.25])
    for tp in (1, 2):
        low, high, mid = (w.with_tensor_parallel(tp).profile(2, "none") for w in (one, four, mean))
        assert np.allclose(mid.forward, 0.75 * np.asarray(low.forward) + 0.25 * np.asarray(high.forward))
        assert np.allclose(mid.backward, 0.75 * np.asarray(low.backward) + 0.25 * np.asarray(high.backward))
        assert np.allclose(mid.send_bytes, 0.75 * np.asarray(low.send_bytes) + 0.25 * np.asarray(high.send_bytes))
        assert np.allclose(mid.activation_bytes, np.maximum(low.activation_bytes, high.activation_bytes))
    best = search(mean, CLUSTER, BATCH, SearchOptions(pp=2, top=1)).best
    ranking = rank_on_mix([MixCandidate("p", best, None, mean_rank=1)],
                          parse_mix([{"cameras": 1, "count": 3}, {"cameras": 4, "count": 1}]), [one, four], mean,
                          global_batch=BATCH, draws=4)
    row = ranking.plans[0]
    assert row.mean_sample_ms == pytest.approx(best.step_time, rel=1e-9)  # the search's step is the mean sample's


# ---------------------------------------------------------------- messages per microbatch

@pytest.mark.parametrize("mode", ["eager", "serialized"])
def test_messages_are_priced_per_microbatch_from_its_samples_shapes(mode):
    # Across a cut between two nodes (2 GPUs a node, pp = 4), a microbatch's message is the link's
    # latency plus its samples' bytes: at the planned shape the b samples' shares add up to the
    # evaluator's message time exactly, a four-camera sample carries more than a one-camera one,
    # and a batch of the planned shape still gives back the planned step.
    from pipeplan.planner.links import Links
    from pipeplan.planner.mix_rank import _Costs, _timed_schedule

    cluster = Cluster.of("h100-80g", 8, gpus_per_node=2)
    options = SearchOptions(pp=4, top=2, dp_modes=("zero2",), send_mode=mode, schedules=["1f1b"])
    plan = search(_workload(cameras=3), cluster, BATCH, options).best
    schedule, _ = _timed_schedule(plan)
    costs = _Costs([_workload(cameras=1), _workload(cameras=4)], _workload(cameras=3))
    per_shape, planned = costs.messages(plan, schedule, cluster)
    config = type("C", (), {"micro_batch_size": plan.micro_batch_size, "pp": plan.pp, "dp": plan.dp})()
    boundary = Links(_workload(cameras=3).with_tensor_parallel(plan.tp), cluster.for_tensor_parallel(plan.tp),
                     mode).boundary_times(config, plan.layers_per_stage, schedule.placement)
    assert np.allclose(planned * plan.micro_batch_size, boundary) and min(boundary) > 0
    assert np.all(per_shape[1] > per_shape[0])  # four cameras send more tokens across every cut
    mix = [{"cameras": 1, "count": 1}, {"cameras": 4, "count": 1}]
    priced = _rank([plan], mix, draws=4, cluster=cluster, send_mode=mode).rows[0]
    held = _rank([plan], mix, draws=4).rows[0]
    assert priced.expected_ms != held.expected_ms and priced.bound_ms <= priced.expected_ms
    same = _rank([plan], [{"cameras": 3, "count": 1}], draws=2, cluster=cluster, send_mode=mode).rows[0]
    assert same.expected_ms == pytest.approx(plan.step_time, rel=1e-9)


def test_plan_1_outside_the_list_is_timed_at_the_mean_sample_as_the_search_would():
    # A plan of the main table that the mean-sample list lacks is simulated on the mean sample's
    # workload; for plans of that search (pp = 1, 2 and 4; interleaved among them) this gives back
    # the search's own step.
    from pipeplan.planner.mix_search import _at_mean, mean_sample_workload

    mean = mean_sample_workload([_workload(cameras=1), _workload(cameras=4)], [0.9, 0.1])
    schedules = set()
    for pp in (1, 2, 4):
        options = SearchOptions(pp=pp, top=3)
        for plan in search(mean, CLUSTER, BATCH, options).plans:
            again = _at_mean(plan, mean, CLUSTER, options)
            assert again is not None and again.step_time == pytest.approx(plan.step_time, rel=1e-12)
            schedules.add(plan.schedule)
    assert schedules - {"1f1b"}


def test_a_plan_1_that_cannot_hold_the_largest_samples_is_not_timed_and_says_why():
    # Planned at one camera with the memory just above plan 1's peak: on a mix with four-camera
    # samples, plan 1's layout cannot hold a microbatch of them (the mean-sample search keeps the
    # largest shape's memory), so its row says so instead of timing it.
    from pipeplan.planner.mix_search import search_on_mix

    probe = search(_workload(cameras=1), CLUSTER, BATCH, SearchOptions(pp=2, top=1, dp_modes=("zero2",))).best
    options = SearchOptions(pp=2, top=1, dp_modes=("zero2",), memory_capacity=max(probe.peak_memory) * 1.001,
                            micro_batch_size=probe.micro_batch_size, tp=probe.tp)
    main = search(_workload(cameras=1), CLUSTER, BATCH, options)
    mix = parse_mix([{"cameras": 1, "count": 1}, {"cameras": 4, "count": 1}])
    found = search_on_mix(mix, [_workload(cameras=1), _workload(cameras=4)], CLUSTER, BATCH, options, main=main,
                          draws=4, max_top=1)
    first = next(row for row in found.ranking.rows if row.planned_rank == 1)
    assert not first.re_ranked and "does not fit a microbatch of the mix's largest samples" in first.note


# ---------------------------------------------------------------- per-stage recompute and the engine's pipeline costs

def _stage_plan(**fields):
    from types import SimpleNamespace
    return SimpleNamespace(**{"tp": 1, "micro_batch_size": 2, "pp": 4, "dp_mode": "zero2", **fields})


def test_block_n_shapes_are_timed_on_their_stages_not_the_lower_bound():
    # Megatron-LM's block:N recomputes the first N blocks of each stage: the mix times each stage as the
    # search's layouts do (Workload.stage_costs), not on the partitioner's lower-bound profile (review)
    from pipeplan.planner.mix_costs import _Costs

    work = Workload.from_spec(presets.get("gpt-1.5b"), DEVICE).with_recompute("block:2")
    sizes = (6, 6, 6, 6)
    plan = _stage_plan(layers_per_stage=sizes, recompute=("block:2",) * 4)
    forward, backward, weight = _Costs([work], work).stage(0, plan)
    staged = work.stage_costs(2, "block:2", sizes)
    lower = work.profile(2, "block:2").stage_costs(sizes)
    assert np.allclose(backward * 2, staged.backward, rtol=1e-12) and np.allclose(forward * 2, staged.forward)
    assert np.allclose(weight * 2, staged.weight)
    assert not np.allclose(staged.backward, lower.backward)


def test_the_engines_pipeline_costs_are_in_each_shapes_stage_costs():
    # DeepSpeed's pipeline engine (a factor on forward and backward, a gradient accumulation pass per
    # microbatch) is applied per shape as the search's layouts apply it, not held in the offset (review)
    from pipeplan.planner.engine_costs import EngineCosts
    from pipeplan.planner.mix_costs import _Costs

    work = _workload(cameras=3)
    engine = EngineCosts("deepspeed", accumulate={"zero2": 4.0}, pipeline_factors={DEVICE.name: 1.5})
    sizes = (10, 10, 10, work.num_layers - 30)
    plan = _stage_plan(layers_per_stage=sizes, recompute=("none",) * 4)
    plain = _Costs([work], work).stage(0, plan)
    priced = _Costs([work], work, engine, DEVICE).stage(0, plan)
    assert np.allclose(priced[0], 1.5 * plain[0], rtol=1e-12)
    assert np.all(priced[1] > 1.5 * plain[1])  # the accumulation pass on top of the factor
    trainable = work.profile(2).trainable_params
    ends = np.cumsum((0, *sizes))
    applied = engine.pipeline_for("zero2").applied(work.stage_costs(2, "none", sizes),
                                                   [float(sum(trainable[ends[s]:ends[s + 1]])) for s in range(4)],
                                                   DEVICE, work.time_unit)
    assert np.allclose(priced[1] * 2, applied.backward, rtol=1e-12)
    # no pipeline (pp = 1) or no device: nothing applied
    assert np.allclose(_Costs([work], work, engine, DEVICE).stage(0, _stage_plan(
        layers_per_stage=(work.num_layers,), recompute=("none",), pp=1))[0],
        _Costs([work], work).stage(0, _stage_plan(layers_per_stage=(work.num_layers,), recompute=("none",), pp=1))[0])
    assert np.allclose(_Costs([work], work, engine, None).stage(0, plan)[1], plain[1])


def test_the_mean_sample_workload_prices_the_largest_shapes_loss_logits():
    # Memory at the mean sample is the largest shape's: the loss's fp32 logits too, whichever shape is first (review)
    from pipeplan.planner.memory import MemoryModel, loss_layers
    from pipeplan.planner.mix_search import mean_sample_workload

    short, long = (Workload.from_spec(presets.get("pi0-fast", text_tokens=t), DEVICE) for t in (50, 250))
    assert loss_layers(short)[0][1] < loss_layers(long)[0][1]
    for order in ([short, long], [long, short]):
        mean = mean_sample_workload(order, [0.5, 0.5])
        assert loss_layers(mean) == loss_layers(long)
        loss, _ = MemoryModel(mean, "adam", None).transient_bytes(1, "full")
        assert loss.tolist() == MemoryModel(long, "adam", None).transient_bytes(1, "full")[0].tolist()

"""Tests of pipeplan.viz.trace: Chrome trace-event JSON for Perfetto and chrome://tracing."""

from __future__ import annotations

import gzip
import json
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import pipeplan
from pipeplan import CommModel, InvalidInputError, StageCosts, Timeline
from pipeplan.viz import chrome_trace, write_trace

from _builders import simulated_timelines as timelines


def events(trace: dict, phase: str, tid: int | None = None) -> list[dict]:
    return [e for e in trace["traceEvents"] if e["ph"] == phase and (tid is None or e.get("tid") == tid)]


def test_worked_example_two_stages_one_microbatch() -> None:
    # Two stages of F = 1 ms, B = 2 ms, one microbatch, no communication cost:
    # F(0) 0–1, F(1) 1–2, B(1) 2–4, B(0) 4–6 (ms) → microseconds × 1000.
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=1),
                                 StageCosts([1, 1]))
    trace = chrome_trace(timeline)
    spans = {(e["pid"], e["name"]): (e["ts"], e["dur"]) for e in events(trace, "X", 0)}
    assert spans == {
        (0, "F0 (stage 0)"): (0.0, 1000.0),
        (1, "F0 (stage 1)"): (1000.0, 1000.0),
        (1, "B0 (stage 1)"): (2000.0, 2000.0),
        (0, "B0 (stage 0)"): (4000.0, 2000.0),
    }
    idle = {(e["pid"], e["name"]): (e["ts"], e["dur"]) for e in events(trace, "X", 1)}
    assert idle == {
        (0, "starved_downstream"): (1000.0, 3000.0),
        (1, "fill"): (0.0, 1000.0),
        (1, "drain"): (4000.0, 2000.0),
    }
    names = {e["pid"]: e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name"}
    assert names == {0: "rank 0", 1: "rank 1"}
    assert trace["displayTimeUnit"] == "ms"
    assert trace["otherData"]["makespan"] == 6.0


def test_blocked_sends_appear_on_the_idle_thread() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                                 StageCosts([30, 10, 10, 20]), CommModel(latency=3, send_mode="rendezvous"))
    trace = chrome_trace(timeline)
    blocked = [e for e in events(trace, "X", 1) if e["name"] == "blocked"]
    expected = [iv for iv in timeline.idle_intervals() if iv.cause.value == "blocked"]
    assert blocked and len(blocked) == len(expected)


def test_us_per_unit_scales_times() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=1),
                                 StageCosts([0.5]))
    trace = chrome_trace(timeline, us_per_unit=1e6)  # a timeline in seconds
    assert [(e["ts"], e["dur"]) for e in events(trace, "X", 0)] == [(0.0, 5e5), (5e5, 1e6)]


@pytest.mark.parametrize("factor", [0, -1, float("nan"), float("inf"), "fast"])
def test_rejects_bad_us_per_unit(factor: object) -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=1),
                                 StageCosts([1]))
    with pytest.raises(InvalidInputError, match="us_per_unit"):
        chrome_trace(timeline, us_per_unit=factor)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["step.json", "step.json.gz"])
def test_write_trace_round_trips(tmp_path: Path, name: str) -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=3, num_microbatches=4),
                                 StageCosts([1, 2, 3]))
    path = tmp_path / name
    write_trace(timeline, path)
    opener = gzip.open if name.endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as handle:
        assert json.load(handle) == chrome_trace(timeline)


def test_write_trace_names_an_unwritable_path(tmp_path: Path) -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=1, num_microbatches=1),
                                 StageCosts([1]))
    with pytest.raises(InvalidInputError, match="missing"):
        write_trace(timeline, tmp_path / "missing" / "step.json")


@settings(max_examples=40, deadline=None)
@given(timeline=timelines())
def test_trace_matches_the_timeline(timeline: Timeline) -> None:
    trace = chrome_trace(timeline)
    assert json.loads(json.dumps(trace, allow_nan=False)) == trace  # valid, finite JSON
    # One complete event per action, on the compute thread of the action's rank.
    computed = events(trace, "X", 0)
    seen = Counter((e["args"]["kind"], e["args"]["stage"], e["args"]["microbatch"]) for e in computed)
    assert seen == Counter(tuple(action) for order in timeline.schedule.orders for action in order)
    by_action = {(e["args"]["kind"], e["args"]["stage"], e["args"]["microbatch"]): e for e in computed}
    for record in timeline.records():
        event = by_action[tuple(record.action)]
        assert event["pid"] == record.rank == timeline.schedule.placement[record.action.stage]
        assert event["name"] == f"{record.action.kind}{record.action.microbatch} (stage {record.action.stage})"
        assert event["ts"] == pytest.approx(record.start * 1000)
        assert event["dur"] == pytest.approx((record.end - record.start) * 1000)
    # Idle intervals on thread 1, named by cause.
    idle = sorted((e["pid"], e["ts"], e["dur"], e["name"]) for e in events(trace, "X", 1))
    expected = sorted((iv.rank, iv.start * 1000, (iv.end - iv.start) * 1000, iv.cause.value)
                      for iv in timeline.idle_intervals())
    assert idle == expected
    # Counters follow Timeline.memory exactly.
    for rank in range(timeline.num_ranks):
        memory = timeline.memory(rank)
        inflight = [e for e in events(trace, "C") if e["pid"] == rank and e["name"] == "in-flight"]
        sizes = [e for e in events(trace, "C") if e["pid"] == rank and e["name"] == "activation"]
        np.testing.assert_allclose([e["ts"] for e in inflight], memory.times * 1000)
        np.testing.assert_array_equal([e["args"]["microbatches"] for e in inflight], memory.inflight)
        np.testing.assert_allclose([e["args"]["bytes"] for e in sizes], memory.bytes)
    names = sorted(e["args"]["name"] for e in events(trace, "M") if e["name"] == "process_name")
    assert names == sorted(f"rank {r}" for r in range(timeline.num_ranks))

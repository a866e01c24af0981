"""Fuzz the command line and the main Python entry points with hypothesis.

Every verb the parser registers (so verbs added later are fuzzed too) gets
argument vectors built from its own options: plausible values, edge values
(0, -1, nan, inf, 1e308, 10**10), malformed ones (``30,10,,20``, ``x``) and
awkward paths (a directory, /dev/null, a binary file, a missing directory). The
CLI runs in-process through :func:`pipeplan.cli.main`. Each call must end within
a CPU-time bound with no traceback: exit 0, or exit 2 with exactly one line on
stderr. Work that would start processes or torch modules (``pipeplan run``'s
spawn, seed 003's demo) is stopped at its door: reaching it counts as accepted
arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import sys

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pipeplan
from pipeplan.cli import build_parser, main
from pipeplan.errors import PipeplanError

from _cpu_limits import CpuTimeExceeded, address_space_room, cpu_time_limit
from _doors import Door, close_doors

CALL_LIMIT_S = 30  # CPU seconds of one call (the dual-rate demo story uses ~15): a load that
# slows the machine does not count, a hang does; wall time failed bare `demo` on a loaded machine
EXAMPLES_PER_VERB = int(os.environ.get("PIPEPLAN_FUZZ_EXAMPLES", "25"))  # more: a longer hunt

_Hang = CpuTimeExceeded  # one call ran past CALL_LIMIT_S of CPU time
_time_limit = cpu_time_limit


@pytest.fixture(scope="module")
def paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("fuzz")
    profile = root / "profile.csv"
    profile.write_text("name,forward\n" + "".join(f"l{i},{1 + i % 3}\n" for i in range(8)))
    binary = root / "binary.csv"
    binary.write_bytes(b"\xff\xfe\x00name")
    (root / "dir.csv").mkdir()
    return {
        "out": [str(root / "out.png"), str(root / "out.json"), str(root / "nodir" / "x.png"), str(root),
                "/dev/null", str(root / "out.svg")],
        "in": [str(profile), str(binary), str(root / "dir.csv"), "/dev/null", str(root / "missing.csv"),
               str(root / "profile.txt")],
    }


#: Address space a fuzzed call may add: an input that would take more fails with MemoryError
#: (a bug the test reports) instead of summoning the machine's OOM killer.
HEADROOM_BYTES = 3 * 2**30


@pytest.fixture(autouse=True)
def _bounded_memory():
    with address_space_room(HEADROOM_BYTES):
        yield


@pytest.fixture(autouse=True)
def _stop_at_processes(monkeypatch):
    close_doors(monkeypatch)


INTS = ["-1", "0", "1", "2", "3", "4", "8", "10000000000", "x", "2.5"]
FLOATS = ["0", "-1", "0.5", "1", "2", "30", "nan", "inf", "1e308", "x"]
LISTS = ["30,10,10,20", "1", "1,1", "2,1,1", "30,10,,20", "a,b", "1e308,1", "-1,2", "0,1", "5,5,5,5,5,5,5,5",
         "nan,1", ","]
SIZES = ["12GB", "4", "1", "0", "-1GB", "x", "1e400", "80GiB", "100MB"]
WORDS = ["1f1b", "gpipe", "interleaved", "zb-h1", "zb-h2", "zb-v", "adaptive", "x", "", "lesson16",
         "megatron", "nosuch:factory", "gloo"]


def _values(action: argparse.Action, paths: dict[str, list[str]]) -> list[str]:
    """Candidate values for one option, from what the parser says about it."""
    if action.choices:
        return [str(c) for c in action.choices] + ["nosuch"]
    kind = action.type
    name = getattr(kind, "__qualname__", "") or ""
    dest = action.dest
    if dest in ("plot", "trace", "out", "output", "write") or (action.metavar or "") == "PATH":
        return paths["out"]
    if dest in ("profile", "file", "input"):
        return paths["in"]
    if kind is int:
        return INTS
    if kind is float:
        return FLOATS
    if "float_list" in name:
        return LISTS
    if "bytes" in name:
        return SIZES
    return WORDS + FLOATS[:3]


def _verbs() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


@st.composite
def _argv(draw, verb: str, parser: argparse.ArgumentParser, paths: dict[str, list[str]]) -> list[str]:
    optional = [a for a in parser._actions if a.option_strings and not isinstance(
        a, (argparse._HelpAction, argparse._VersionAction))]
    positional = [a for a in parser._actions if not a.option_strings]
    argv = [verb]
    for action in positional:
        if action.nargs in ("?", "*") and draw(st.booleans()):
            continue
        argv.append(draw(st.sampled_from(_values(action, paths))))
    required = [a for a in optional if a.required]
    chosen = draw(st.lists(st.sampled_from(optional), max_size=6, unique_by=lambda a: a.dest)) if optional else []
    for action in required:
        if action not in chosen and draw(st.integers(0, 9)) > 0:
            chosen.append(action)
    for action in chosen:
        flag = draw(st.sampled_from(action.option_strings))
        if action.nargs == 0:
            argv.append(flag)
        else:
            argv += [flag, draw(st.sampled_from(_values(action, paths)))]
    if draw(st.integers(0, 19)) == 0:
        argv.append("--nosuch-flag")
    return argv


def _run(argv: list[str]) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    status: int
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), _time_limit(CALL_LIMIT_S):
        try:
            status = main(argv)
        except SystemExit as exit_:
            status = exit_.code if isinstance(exit_.code, int) else (0 if exit_.code is None else 2)
        except Door:
            status = 0
    return status, out.getvalue(), err.getvalue()


def _check(argv: list[str]) -> None:
    try:
        status, _, err = _run(argv)
    except _Hang as hang:
        pytest.fail(f"pipeplan {' '.join(argv)}: {hang}")
    except Exception as error:  # noqa: BLE001 - any escaping exception is a traceback for the user
        pytest.fail(f"pipeplan {' '.join(argv)} raised {type(error).__name__}: {error}")
    assert "Traceback" not in err, f"pipeplan {' '.join(argv)}:\n{err}"
    assert status in (0, 2), f"pipeplan {' '.join(argv)} exited {status}:\n{err}"
    if status == 2:
        lines = [line for line in err.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("pipeplan") and "error:" in lines[0], (
            f"pipeplan {' '.join(argv)} rejected with:\n{err}")


def _remembered(function):
    """``function`` answering a call it has answered already (same arguments, by equality) from memory."""
    answers: list[tuple[tuple, dict, object]] = []

    def remembered(*args, **kwargs):
        for known_args, known_kwargs, answer in answers:
            if known_args == args and known_kwargs == kwargs:
                return answer
        answer = function(*args, **kwargs)
        answers.append((args, kwargs, answer))
        return answer

    return remembered


def _reuse_searches(monkeypatch) -> None:
    """The planner's workloads and searches answer a question they have answered already from memory.

    ``demo``'s default story (pi0) asks the same two searches whatever its ``--width`` (about 5 CPU s a
    call, most of this verb's fuzzing time); the first such call still runs them under the CPU bound,
    and an argument that changes the question runs afresh. (A workload holds fresh closures, so equal
    questions compare equal only once ``Workload.from_spec`` returns the one it built.)
    """
    import pipeplan.planner as planner

    monkeypatch.setattr(planner.Workload, "from_spec", _remembered(planner.Workload.from_spec))
    monkeypatch.setattr(planner, "search", _remembered(planner.search))


@pytest.mark.parametrize("verb", sorted(_verbs()))
def test_cli_verb_never_tracebacks_or_hangs(verb, paths, monkeypatch):
    parser = _verbs()[verb]
    if verb == "demo":
        _reuse_searches(monkeypatch)

    @settings(max_examples=EXAMPLES_PER_VERB, deadline=None, database=None,
              suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
    @given(_argv(verb, parser, paths))
    def check(argv):
        _check(argv)

    check()


def test_the_fuzzer_reaches_both_outcomes(paths):
    """The harness itself: a valid call exits 0, a bad one exits 2 with one line."""
    assert _run(["simulate", "--forward", "30,10,10,20", "-m", "4"])[0] == 0
    status, _, err = _run(["simulate", "--forward", "30,10,,20"])
    assert status == 2 and len(err.strip().splitlines()) == 1


# ------------------------------------------------------------------ Python API
_GARBAGE = st.sampled_from([None, "x", "eager", True, 0, -1, 2.5, math.nan, math.inf, 10**10, [], [1, 2],
                            [30, 10, 10, 20], [True, 2], ["a"], {"a": 1}, object()])


def _api_ok(call) -> None:
    try:
        with _time_limit(CALL_LIMIT_S):
            call()
    except PipeplanError:
        return
    except _Hang as hang:
        pytest.fail(str(hang))


@settings(max_examples=150, deadline=None, database=None)
@given(name=st.sampled_from([*pipeplan.SCHEDULES, "x"]), stages=_GARBAGE | st.integers(1, 6),
       micro=_GARBAGE | st.integers(1, 6))
def test_build_schedule_rejects_bad_arguments_with_pipeplan_errors(name, stages, micro):
    _api_ok(lambda: pipeplan.build_schedule(name, num_stages=stages, num_microbatches=micro))


@settings(max_examples=150, deadline=None, database=None)
@given(schedule=_GARBAGE, costs=_GARBAGE, comm=_GARBAGE, use_real=st.integers(0, 3))
def test_simulate_and_views_reject_bad_arguments_with_pipeplan_errors(schedule, costs, comm, use_real):
    from pipeplan.viz import rank_table, step_table, text_gantt

    real_schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=4)
    real_costs = pipeplan.StageCosts([30, 10, 10, 20])
    if use_real & 1:
        schedule = real_schedule
    if use_real & 2:
        costs = real_costs
    _api_ok(lambda: pipeplan.simulate(schedule, costs, comm))
    _api_ok(lambda: pipeplan.simulate(real_schedule, real_costs, comm))
    for view in (text_gantt, rank_table, step_table):
        _api_ok(lambda: view(schedule))
    _api_ok(lambda: text_gantt(pipeplan.simulate(real_schedule, real_costs), width=comm))


@settings(max_examples=150, deadline=None, database=None)
@given(forward=_GARBAGE, backward=_GARBAGE, latency=_GARBAGE, bandwidth=_GARBAGE, layers=_GARBAGE,
       stages=_GARBAGE)
def test_costs_comm_and_partition_reject_bad_arguments_with_pipeplan_errors(
        forward, backward, latency, bandwidth, layers, stages):
    _api_ok(lambda: pipeplan.StageCosts(forward=forward))
    _api_ok(lambda: pipeplan.StageCosts(forward=[1, 2], backward=backward))
    _api_ok(lambda: pipeplan.CommModel(latency=latency, bandwidth=bandwidth))
    _api_ok(lambda: pipeplan.partition_layers(layers, stages))
    _api_ok(lambda: pipeplan.partition_layers([1.0, 2.0, 3.0], stages))


@settings(max_examples=150, deadline=None, database=None)
@given(schedule=_GARBAGE, costs=_GARBAGE, comm=_GARBAGE, slowdown=_GARBAGE, rank=_GARBAGE, stages=_GARBAGE,
       use_real=st.integers(0, 3))
def test_shared_simulation_timeline_ranks_and_uniform_costs_reject_bad_arguments(
        schedule, costs, comm, slowdown, rank, stages, use_real):
    real_schedule = pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=4)
    real_costs = pipeplan.StageCosts([30, 10, 10, 20])
    schedule = real_schedule if use_real & 1 else schedule
    costs = real_costs if use_real & 2 else costs
    _api_ok(lambda: pipeplan.simulate(schedule, costs, comm, slowdown=(1.0, 2.0)))
    _api_ok(lambda: pipeplan.simulate(real_schedule, real_costs, slowdown=slowdown))
    timeline = pipeplan.simulate(real_schedule, real_costs)
    _api_ok(lambda: timeline.memory(rank))
    _api_ok(lambda: timeline.idle_intervals(rank))
    _api_ok(lambda: list(timeline.records(rank)))
    _api_ok(lambda: pipeplan.StageCosts.uniform(stages, forward=rank))


def test_bool_costs_are_rejected():
    with pytest.raises(pipeplan.InvalidInputError, match=r"forward\[0\] must be a number, got True"):
        pipeplan.StageCosts(forward=[True, 2])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(pytest.main([__file__, "-q"]))


@settings(max_examples=150, deadline=None, database=None)
@given(orders=_GARBAGE, placement=_GARBAGE, layers=_GARBAGE, profile=_GARBAGE, num_layers=_GARBAGE)
def test_schedules_profiles_and_predictions_reject_bad_arguments_with_pipeplan_errors(
    orders, placement, layers, profile, num_layers
):
    from pipeplan.layers import LayerProfile
    from pipeplan.predict import predict

    real_profile = LayerProfile.uniform(4)
    real_schedule = pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2)
    _api_ok(lambda: pipeplan.Schedule(orders, [0], 1))
    _api_ok(lambda: pipeplan.Schedule([[("F", 0, 0), ("B", 0, 0)]], placement, 1))
    _api_ok(lambda: real_profile.stage_costs(layers))
    _api_ok(lambda: predict(profile, real_schedule, [2, 2]))
    _api_ok(lambda: LayerProfile.uniform(num_layers))

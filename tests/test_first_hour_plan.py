"""Issue 24, the plan verb: the commands a new user ran in the first hour, and what they print now.

Items 2 (memory units), 3 (circular advice), 4 (the plan table and its PNG), 5 (silent files,
progress) and 8 (``--optimizer``), each with the issue's command or its small equivalent.
"""

from __future__ import annotations

import json
import re

import pytest

from pipeplan.layers import LayerProfile
from pipeplan.units import GIB, format_gib

_OPENVLA_ONE_GPU = ("plan", "--preset", "openvla-7b", "--gpus", "1", "--global-batch", "8")
_DECIMAL_GB = re.compile(r"\d GB\b(?!/s)")  # "85.52 GB" — a memory figure in decimal GB (bandwidths are GB/s)


def _one_line_error(status: int, err: str) -> str:
    assert status == 2 and err.count("\n") == 1 and "Traceback" not in err, err
    return err.strip()


@pytest.fixture
def vla_profile(tmp_path):
    """A dumbbell VLA, times in ms: a heavy vision block, 12 decoder layers, an action head."""
    profile = LayerProfile([30.0] + [2.0] * 12 + [10.0], params=[4e8] + [2e8] * 12 + [1e8],
                           activation_bytes=[3e9] + [1e9] * 12 + [5e8],
                           names=["vision"] + [f"layers.{i}" for i in range(12)] + ["action_head"])
    path = tmp_path / "vla.json"
    path.write_text(json.dumps(profile.to_records()))
    return str(path)


# ------------------------------------------------------------------ item 2: memory units
def test_one_h100_is_one_number_in_gib_with_and_without_headroom(run_cli):
    # was: "no plan fits 76.97 GB per GPU (its 85.52 GB less 10% headroom)" beside "71.7 GiB" in the table
    err = _one_line_error(*run_cli(*_OPENVLA_ONE_GPU)[::2])
    assert err.startswith("pipeplan plan: error: no plan fits a GPU of 79.6 GiB (71.7 GiB usable, 10% headroom): ")
    assert not _DECIMAL_GB.search(err)
    status, out, err = run_cli("plan", "--preset", "openvla-7b", "--gpus", "2", "--global-batch", "8", "--top", "2")
    assert status == 0, err
    assert "each GPU 79.6 GiB (71.7 GiB usable, 10% headroom)" in out  # the capacity once, in the legend
    assert "/ 71.7 GiB" not in out and not _DECIMAL_GB.search(out)  # not on every row; never decimal GB
    rows = [line for line in out.splitlines() if re.match(r"│\s+\d+ │", line)]
    assert rows and all(re.search(r"│\s+[\d.]+ GiB │", row) for row in rows)


@pytest.mark.parametrize("spelling", ["0.1", "10%"])
def test_headroom_is_a_fraction_or_a_percentage(run_cli, spelling):
    status, out, err = run_cli("plan", "--preset", "openvla-7b", "--gpus", "2", "--global-batch", "8", "--top", "1",
                               "--headroom", spelling, "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert payload["plans"][0]["memory_capacity"] == pytest.approx(0.9 * 79.6 * GIB, rel=1e-3)
    assert payload["assumptions"]["memory"].startswith("79.6 GiB (71.7 GiB usable, 10% headroom) per GPU")


def test_headroom_zero_plans_up_to_the_whole_gpu(run_cli):
    status, out, err = run_cli("plan", "--preset", "openvla-7b", "--gpus", "2", "--global-batch", "8", "--top", "1",
                               "--headroom", "0", "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert payload["plans"][0]["memory_capacity"] == pytest.approx(79.6 * GIB, rel=1e-3)
    assert payload["assumptions"]["memory"].startswith("79.6 GiB per GPU")


@pytest.mark.parametrize("extra,message", [
    (["--headroom", "1.5"], "--headroom 1.5 is above 1: it is a fraction, write 0.015 or 1.5%"),
    (["--headroom", "100%"], "--headroom must be in [0, 1) (or [0%, 100%)), got '100%'"),
    (["--headroom", "-0.1"], "--headroom must be in [0, 1) (or [0%, 100%)), got '-0.1'"),
    (["--headroom", "ten"], "--headroom must be a fraction like 0.4 or a percentage like 40%"),
])
def test_a_bad_headroom_is_one_line(run_cli, capsys, extra, message):
    status, _, err = run_cli(*_OPENVLA_ONE_GPU, *extra)
    assert status == 2
    assert message in err and "Traceback" not in err


def test_headroom_does_not_combine_with_memory(run_cli):
    err = _one_line_error(*run_cli(*_OPENVLA_ONE_GPU, "--memory", "40GiB", "--headroom", "5%")[::2])
    assert "--headroom does not apply with --memory" in err


# ------------------------------------------------------------------ item 3: computed advice
def test_openvla_on_one_gpu_suggests_only_what_fits_and_following_it_plans(run_cli):
    # was: "--optimizer distributed" suggested; following it raised the need from 120.7 to 135.7 GB
    err = _one_line_error(*run_cli(*_OPENVLA_ONE_GPU)[::2])
    assert "--optimizer" not in err and "distributed" not in err
    advice = err.split("what fits instead: ", 1)[1]
    remedies = advice.split("; ")
    numbers = [re.fullmatch(r"(.+?): ([\d.]+) GiB per GPU, fits ([\d.]+) GiB \((.+), ([\d.]+) ms a step\)", r)
               for r in remedies]
    assert all(numbers), remedies
    for match in numbers:  # each one's number fits its capacity
        assert float(match.group(2)) <= float(match.group(3))
    flags = numbers[0].group(1)
    assert flags == "--gpus 2"  # the fewest GPUs whose plan fits
    # following it plans, and its best plan holds no more than the advice said (its search was the same)
    status, out, err = run_cli("plan", "--preset", "openvla-7b", "--gpus", "2", "--global-batch", "8", "--json")
    assert status == 0, err
    best = json.loads(out)["plans"][0]
    assert format_gib(max(best["peak_memory"])) == f"{numbers[0].group(2)} GiB"


def test_the_refused_distributed_optimizer_points_to_zero1_and_zero1_on_one_gpu_is_not_advised_again(run_cli):
    err = _one_line_error(*run_cli(*_OPENVLA_ONE_GPU, "--optimizer", "distributed")[::2])
    assert err == "pipeplan plan: error: the distributed optimizer is the data-parallel mode zero1: --dp-modes zero1"
    err = _one_line_error(*run_cli(*_OPENVLA_ONE_GPU, "--dp-modes", "zero1")[::2])
    advice = err.split("what fits instead: ", 1)[1]
    assert "without --dp-modes" not in advice  # one GPU has no data parallelism: dropping it cannot help
    assert advice.startswith("--gpus 2: ")


def test_nothing_in_reach_is_said_plainly(run_cli, tmp_path):
    # one layer of 6e9 parameters at 20 bytes each (ddp only): no GPU count, headroom or mode fits it
    path = tmp_path / "big.json"
    path.write_text(json.dumps(LayerProfile([10.0, 1.0], params=[6e9, 1e6]).to_records()))
    err = _one_line_error(*run_cli("plan", "--profile", str(path), "--gpus", "1", "--global-batch", "8",
                                   "--optimizer", "20")[::2])
    assert "what fits instead" not in err
    assert "nothing in reach fits (tried --headroom 0, --gpus 2, --gpus 4, --gpus 8)" in err


def test_the_advice_is_on_the_exception(vla_profile):
    from pipeplan.planner import Cluster, SearchOptions, Workload, search
    from pipeplan.planner.advice import NoPlanFitsError

    workload = Workload.from_profile(LayerProfile.from_file(vla_profile))
    with pytest.raises(NoPlanFitsError) as error:
        search(workload, Cluster.of("h100-80g", 4), 16, SearchOptions(memory_capacity=15e9))
    remedies = error.value.remedies
    assert [r.flags for r in remedies] == ["without --memory", "--gpus 8"]
    for remedy in remedies:
        assert remedy.plan.fits and remedy.worst_bytes <= remedy.capacity * (1 + 1e-9)
        assert set(remedy.to_dict()) >= {"flags", "worst_gpu_bytes", "capacity_bytes", "step_time"}
    assert error.value.tried == ("without --memory", "--gpus 8")


# ------------------------------------------------------------------ item 4: the table
def test_sixteen_ranks_print_their_partitions_in_full_and_a_legend(run_cli):
    status, out, err = run_cli("plan", "--preset", "pi0", "--gpus", "16", "--global-batch", "256", "--pp", "16",
                               "--top", "3")
    assert status == 0, err
    lines = out.splitlines()
    assert any(line.startswith("tp×pp×dp: tensor × pipeline × data-parallel GPUs; b×m: micro-batch size × "
                               "microbatches per step") for line in lines)
    assert any("v=N: N chunks (virtual stages) per rank, and 3+1+4 is one rank's chunks" in line for line in lines)
    assert any(line.startswith("recompute per module (vision / llm / action_expert)") for line in lines)
    start = lines.index("partitions in full (layers per rank, rank 0 first):")
    text = " ".join(line.strip() for line in lines[start + 1:start + 4])
    first = re.match(r"#1 \(16 ranks\): (.*?)(?= #2 |$)", text)
    assert first, text
    ranks = first.group(1).split(", ")
    assert len(ranks) == 16 and sum(int(n) for rank in ranks for n in rank.split("+")) == 50
    row = next(line for line in lines if re.match(r"│\s+1 │", line))
    assert "…" in row  # the cell is cut at a rank; the full one is below


def test_plans_that_tie_at_three_figures_are_marked(run_cli):
    # was: "992.763" for plans 0.04% apart
    status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "4", "--global-batch", "32", "--top", "4",
                               "--json")
    assert status == 0, err
    payload = json.loads(out)
    steps = [plan["step_time"] for plan in payload["plans"]]
    for plan, step in zip(payload["plans"], steps):
        tie = plan["ties_with"]
        if tie is not None:
            assert abs(step - steps[tie]) < 1.0  # one unit of the third figure of a step of 100–999 ms
    assert any(plan["ties_with"] is not None for plan in payload["plans"])
    status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "4", "--global-batch", "32", "--top", "4")
    assert status == 0, err
    tied = [index for index, plan in enumerate(payload["plans"]) if plan["ties_with"] is not None]
    for index in tied:
        row = next(line for line in out.splitlines() if re.match(rf"│\s+{index + 1} │", line))
        assert f"= #{payload['plans'][index]['ties_with'] + 1} │" in row
    assert "= #N: ties with plan N at the cost model's resolution" in out
    assert "a plan less than one unit of the last figure slower than a faster one ties with it" in out
    assert not re.search(r"lower bound \d+\.\d{3,}", out)  # the bound to 3 figures too


# ------------------------------------------------------------------ items 4 and 5: files
def test_plot_and_trace_say_where_they_went_and_a_long_step_is_drawn_readably(run_cli, vla_profile, tmp_path):
    pytest.importorskip("matplotlib")
    png, trace = tmp_path / "best.png", tmp_path / "best.json"
    status, out, err = run_cli("plan", "--profile", vla_profile, "--gpus", "4", "--pp", "4", "--global-batch", "128",
                               "--micro-batch-size", "1", "--schedules", "1f1b", "--top", "1", "--memory", "40GB",
                               "--plot", str(png), "--trace", str(trace))
    assert status == 0, err
    assert f"wrote {png}" in err.splitlines() and f"wrote {trace}" in err.splitlines()
    assert png.stat().st_size > 1000 and json.loads(trace.read_text())["traceEvents"]
    assert re.search(r"│\s+1×128 │", out)  # b = 1, m = 128: the step the PNG draws as its start and its end


def test_an_unwritable_plot_is_refused_before_the_search(run_cli, tmp_path):
    err = _one_line_error(*run_cli(*_OPENVLA_ONE_GPU, "--plot", str(tmp_path / "no" / "such" / "dir.png"))[::2])
    assert "--plot" in err and "no plan fits" not in err


def test_the_search_progress_is_one_bar_that_restarts_for_the_advice():
    from pipeplan.cli.plan_cmd import _search_progress

    calls: list[tuple[float, str | None]] = []
    report = _search_progress(lambda amount, description=None: calls.append((amount, description)))
    for done in range(5):
        report(done, 4)
    report(0, 2)  # the advice's searches
    report(2, 2)
    assert sum(amount for amount, _ in calls[:5]) == pytest.approx(1.0)
    assert calls[5] == (pytest.approx(-1.0), "looking for what would fit")
    assert calls[6] == (pytest.approx(1.0), None)

"""torch's tensor parallelism as the torch engines run it: DTensor's collectives exposed, async TP hiding a share.

Sources: torch/distributed/tensor/parallel/style.py (``ColwiseParallel`` / ``RowwiseParallel`` redistribute
the input or output where the layer needs it and wait there); torchtitan 0.3.0 config/configs.py
``CompileConfig.enable_async_tensor_parallel`` (refused without ``compile.enable``); the TOML release's
``Parallelism.enable_async_tensor_parallel``. The share is fitted by benchmarks/torchtitan_h100.py.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import engines, hardware
from pipeplan.engines._eager import ASYNC_TP_HIDDEN
from pipeplan.engines.torchtitan_config import llama3_spec
from pipeplan.errors import InvalidInputError
from pipeplan.planner import Workload

RunCli = Callable[..., tuple[int, str, str]]
PLAN = ["--preset", "gpt-1.5b", "--gpus", "16", "--gpu", "h100-96g", "--global-batch", "64", "--tp", "4",
        "--pp", "1", "--dp-modes", "fsdp", "--recompute", "full", "--top", "1", "--json"]


def _profile(overlap: str, hidden: float | None = None, tp: int = 8):
    device = hardware.device("h100-96g")
    work = Workload.from_spec(llama3_spec("8B", 2048), device, tp_comm_overlap=overlap,  # type: ignore[arg-type]
                              async_tp_hidden=hidden)
    return work.with_tensor_parallel(tp).profile(2, "selective")


@settings(max_examples=12, deadline=None)
@given(hidden=st.floats(0.0, 1.0))
def test_async_tp_lies_between_nothing_hidden_and_everything_hidden(hidden: float) -> None:
    """Each layer's forward and backward under async TP: at most DTensor's (``off``), at least Transformer
    Engine's full overlap (``on``), monotone in the share hidden."""
    off, on, mid = _profile("off"), _profile("on"), _profile("async", hidden)
    more = _profile("async", min(1.0, hidden + 0.1))
    for name in ("forward", "backward"):
        for o, n, m, x in zip(getattr(off, name), getattr(on, name), getattr(mid, name), getattr(more, name)):
            assert n - 1e-9 <= x <= m <= o + 1e-9


def test_async_tp_at_its_ends_is_off_and_on() -> None:
    off, on = _profile("off"), _profile("on")
    nothing, everything = _profile("async", 0.0), _profile("async", 1.0)
    assert nothing.forward == pytest.approx(off.forward) and nothing.backward == pytest.approx(off.backward)
    assert everything.forward == pytest.approx(on.forward) and everything.backward == pytest.approx(on.backward)
    fitted = _profile("async")  # the default share is the fitted one
    assert fitted.forward == _profile("async", ASYNC_TP_HIDDEN).forward
    assert sum(on.forward) < sum(fitted.forward) < sum(off.forward)
    assert _profile("async", tp=1).forward == _profile("off", tp=1).forward  # nothing to hide at tp 1


def test_the_torch_engines_price_dtensor_and_megatron_its_default() -> None:
    assert engines.get("torchtitan").tp_overlap({}) == "off"
    assert engines.get("torchtitan").tp_overlap({"async-tp": "on", "compile": "on"}) == "async"
    assert engines.get("torch").tp_overlap({}) == "off"
    assert engines.get("megatron").tp_overlap({}) is None and engines.get("deepspeed").tp_overlap({}) is None


def _plan_json(run_cli: RunCli, *extra: str) -> dict:
    status, out, err = run_cli("plan", *PLAN, *extra)
    assert status == 0, err
    return json.loads(out)["plans"][0] if "plans" in json.loads(out) else json.loads(out)


def test_plan_prices_torchtitans_tp_as_its_knob_says(run_cli: RunCli) -> None:
    vanilla = _plan_json(run_cli, "--engine", "torchtitan", "--compile", "on")
    fast = _plan_json(run_cli, "--engine", "torchtitan", "--compile", "on", "--async-tp", "on")
    megatron = _plan_json(run_cli)
    assert (vanilla["tp_comm_overlap"], fast["tp_comm_overlap"], megatron["tp_comm_overlap"]) == \
        ("off", "async", "backward")
    assert fast["step_time"] < vanilla["step_time"]


@pytest.mark.parametrize("argv, line", [
    (["--engine", "torchtitan", "--async-tp", "on"], "--async-tp on needs --compile on"),
    (["--engine", "megatron", "--async-tp", "on"], "--async-tp"),
    (["--engine", "torchtitan", "--async-tp", "maybe", "--compile", "on"], "--async-tp"),
])
def test_async_tp_refusals_are_one_line(run_cli: RunCli, argv: list[str], line: str) -> None:
    status, _, err = run_cli("plan", *PLAN, *argv)
    assert status == 2 and line in err and err.count("\n") == 1, err


@pytest.mark.parametrize("target", ["torchtitan", "torchtitan-toml"])
def test_async_tp_round_trips_through_the_files(run_cli: RunCli, tmp_path: Path, target: str) -> None:
    """plan --export, then check of what was written: async TP read back, the same step."""
    knobs = ["--engine", "torchtitan", "--compile", "on", "--async-tp", "on"]
    planned = _plan_json(run_cli, *knobs)
    status, _, err = run_cli("plan", *PLAN[:-1], *knobs, "--export", target, "--out", str(tmp_path / "out"))
    assert status == 0, err
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "out"), "--preset", "gpt-1.5b",
                               "--gpus", "16", "--gpu", "h100-96g", "--global-batch", "64", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(out)
    assert checked["config"]["pinned"]["tp_comm_overlap"]["value"] == "async"
    assert checked["predicted"]["step_ms"] == pytest.approx(
        planned["step_time"] * 1e3 * planned["time_unit_seconds"], rel=1e-9)


def test_a_toml_with_async_tp_and_no_compile_is_refused(tmp_path: Path) -> None:
    from pipeplan.engines.torchtitan_config import read_torchtitan_config

    path = tmp_path / "job.toml"
    path.write_text("[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n")
    with pytest.raises(InvalidInputError, match="async TP needs compile.enable"):
        read_torchtitan_config(path)
    path.write_text("[parallelism]\ntensor_parallel_degree = 2\nenable_async_tensor_parallel = true\n"
                    "[compile]\nenable = true\n")
    assert read_torchtitan_config(path).value("async_tp") == "on"


def test_a_measured_profile_plans_with_the_torch_engines(run_cli: RunCli, tmp_path: Path) -> None:
    """A --profile has no spec to price TP on: the engine's own TP is not applied (review: it raised)."""
    from pipeplan.layers import LayerProfile

    path = tmp_path / "prof.json"
    LayerProfile.uniform(8, forward=1.0, params=1e8, activation_bytes=1e8).to_file(str(path))
    for engine in ("torchtitan", "torch"):
        status, _, err = run_cli("plan", "--profile", str(path), "--gpus", "4", "--global-batch", "16",
                                 "--engine", engine)
        assert status == 0, err


def test_the_assumptions_name_the_engines_tp(run_cli: RunCli) -> None:
    status, out, err = run_cli("plan", *PLAN, "--engine", "torchtitan", "--compile", "on")
    assert status == 0, err
    said = json.loads(out)["assumptions"]
    assert said["tp-comm-overlap"].startswith("off (torchtitan: torch's DTensor")
    assert said["tensor parallel"].startswith("torch DTensor TP") and "all exposed" in said["tensor parallel"]

"""Predictions carry the step model's measured error on published runs (issue 33, "Error bands")."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeplan.planner.error_band import CHECKED, error_band

DOC = Path(__file__).resolve().parent.parent / "docs" / "cost_model.md"


def test_the_bands_are_the_fidelity_benchmarks_summary() -> None:
    """The numbers equal the summary line benchmarks/engine_fidelity.py wrote (docs tests check it against the code)."""
    text = DOC.read_text()
    found = re.search(r"Mean \|error\| of throughput over (\d+) runs: \*\*([\d.]+)%\*\* with each run's knobs pinned "
                      r"\(\d+ within 10%, worst ([\d.]+)%\)", text)
    assert found, "the engine-fidelity summary line moved"
    runs, mean, worst = int(found[1]), float(found[2]) / 100, float(found[3]) / 100
    (row,) = [row for row in CHECKED if row.command == "python benchmarks/engine_fidelity.py"
              and row.engine == "megatron"]
    assert (row.runs, row.mean, row.worst) == (runs, pytest.approx(mean), pytest.approx(worst))


def test_the_torchtitan_band_is_the_held_out_summary() -> None:
    """torchtitan's band is the held-out summary line of the same benchmark's second table (not the fitting rows)."""
    text = DOC.read_text()
    found = re.search(r"torchtitan, (\d+) held-out runs: mean \|error\| of WPS \*\*([\d.]+)%\*\* as `plan --engine "
                      r"torchtitan` prices them \(worst ([\d.]+)%", text)
    assert found, "the torchtitan summary line moved"
    runs, mean, worst = int(found[1]), float(found[2]) / 100, float(found[3]) / 100
    (row,) = [row for row in CHECKED if row.engine == "torchtitan" and row.device == "a100-80g"]
    assert row.command == "python benchmarks/engine_fidelity.py"
    assert (row.runs, row.mean, row.worst) == (runs, pytest.approx(mean), pytest.approx(worst))
    band = error_band("a100-80g", "torchtitan", gpt=True)
    assert band.checked and f"±{found[2]}%" in band.line() and "torchtitan runs" in band.line()


def test_the_torchtitan_h100_band_is_its_held_out_summary() -> None:
    """torchtitan on h100-96g: the held-out summary line benchmarks/torchtitan_h100.py wrote in docs/engines.md."""
    text = (DOC.parent / "engines.md").read_text()
    found = re.search(r"(\d+) held-out runs: mean \|error\| \*\*([\d.]+)%\*\* \(\d+ within 10%, worst ([\d.]+)%\)",
                      text)
    assert found, "the torchtitan-h100 summary line moved"
    (row,) = [row for row in CHECKED if row.device == "h100-96g"]
    assert row.engine == "torchtitan" and row.command == "python benchmarks/torchtitan_h100.py"
    assert (row.runs, row.mean, row.worst) == (int(found[1]), pytest.approx(float(found[2]) / 100),
                                                pytest.approx(float(found[3]) / 100))
    assert error_band("h100-96g", "torchtitan", gpt=True).checked
    assert not error_band("h100-80g", "torchtitan", gpt=True).checked


def test_the_deepspeed_band_is_its_held_out_summary() -> None:
    """DeepSpeed's pipeline engine on the A100: the held-out line benchmarks/engine_fidelity.py wrote in docs/engines.md
    (the BLOOM runs its factor's fit did not see), not the fitted rows'."""
    text = (DOC.parent / "engines.md").read_text()
    found = re.search(r"Held out \(not in the factor's fit; the factor in use, [\d.]+\): mean \|error\| of throughput "
                      r"\*\*([\d.]+)%\*\* \((\d+) of (\d+) within 10%, worst ([\d.]+)%\)", text)
    assert found, "the DeepSpeed held-out summary line moved"
    (row,) = [row for row in CHECKED if row.engine == "deepspeed"]
    assert (row.device, row.runs, row.mean, row.worst) == ("a100-80g", int(found[3]), pytest.approx(float(found[1]) / 100),
                                                           pytest.approx(float(found[4]) / 100))
    assert error_band("a100-80g", "deepspeed", gpt=True).checked


def test_a_checked_question_has_no_caveat() -> None:
    band = error_band("a100-80g", "megatron", gpt=True)
    assert band.checked and not band.unchecked
    assert f"±{100 * band.basis.mean:.1f}%" in band.line() and "floor" not in band.line()


@pytest.mark.parametrize("device, engine, gpt, profile, missing", [
    ("h100-80g", "megatron", True, False, "h100-80g"),
    ("h100-80g", "deepspeed", True, False, "h100-80g"),
    ("a100-80g", "megatron", False, False, "beyond a GPT"),
    ("a100-80g", "megatron", True, True, "--profile"),
])
def test_what_was_not_checked_is_named(device: str, engine: str, gpt: bool, profile: bool, missing: str) -> None:
    band = error_band(device, engine, gpt=gpt, measured_profile=profile)
    assert not band.checked
    assert missing in band.line() and "floor" in band.line()


def test_plan_prints_and_carries_the_band(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    argv = ("plan", "--spec", str(DOC.parent.parent / "examples" / "gpt-6.2b.json"), "--gpu", "a100-80g", "--gpus", "8", "--global-batch", "32",
            "--top", "1")
    code, out, _ = run_cli(*argv)
    (row,) = [row for row in CHECKED if row.engine == "megatron"]
    assert code == 0 and f"step and MFU: ±{100 * row.mean:.1f}%" in out
    code, out, _ = run_cli(*argv, "--json")
    band = json.loads(out)["error_band"]
    assert band["checked"] is True and band["runs"] == 18
    code, out, _ = run_cli("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "32", "--top", "1", "--json")
    band = json.loads(out)["error_band"]
    assert band["checked"] is False and any("h100-80g" in item for item in band["unchecked"])

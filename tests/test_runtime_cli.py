"""``pipeplan run``: spawned by itself and under torchrun, human and JSON output."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

from pipeplan.cli import main  # noqa: E402

SMALL = ["--layers", "2", "--batch-size", "10", "-m", "4", "--steps", "1", "--warmup", "1"]


def tiny_model() -> tuple[Any, Any, Any]:
    """A user factory for ``--model test_runtime_cli:tiny_model``."""
    torch.manual_seed(3)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 7), nn.ReLU(), nn.Linear(7, 2))

    def make_batch(batch_size: int, seed: int = 0) -> tuple[Any, Any]:
        generator = torch.Generator().manual_seed(seed)
        return torch.randn(batch_size, 5, generator=generator), torch.randn(batch_size, 2, generator=generator)

    return model, torch.nn.functional.mse_loss, make_batch


def _json_run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert main(["run", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.timeout(120)
def test_run_json_reports_gradient_check_and_prediction(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json_run(capsys, "--nproc", "2", "--schedule", "zb-h1", *SMALL)
    check = report["gradient_check"]
    assert check["ok"] and check["max_abs_diff"] <= 1e-5
    assert check["loss"] == pytest.approx(check["reference_loss"], abs=1e-5)
    prediction = report["prediction"]
    assert prediction["predicted_makespan"] > 0 and prediction["measured_makespan"] > 0
    assert prediction["measured_makespan"] == pytest.approx(report["measured"]["makespan"])
    assert report["measured"]["source"] == "measured"
    assert {a["kind"] for a in report["measured"]["actions"]} == {"F", "B", "W"}
    assert len(report["config"]["layers_per_stage"]) == 2 and sum(report["config"]["layers_per_stage"]) == 4


@pytest.mark.timeout(180)
def test_run_user_model_with_dp_and_checkpointing(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json_run(capsys, "--nproc", "4", "--dp", "2", "--schedule", "1f1b", "--checkpoint",
                       "--model", "test_runtime_cli:tiny_model", "--partition", "3,2",
                       "--batch-size", "8", "-m", "4", "--steps", "1", "--warmup", "0")
    assert report["gradient_check"]["ok"], report["gradient_check"]
    assert report["config"]["pp"] == 2 and report["config"]["dp"] == 2
    assert report["config"]["layers_per_stage"] == [3, 2]
    for rank in report["ranks"]:
        for stage in rank["checkpoint"]:
            assert rank["checkpoint"][stage] is True
            assert rank["saved_activation_bytes"][stage] <= rank["saved_activation_bytes_without_checkpoint"][stage]


@pytest.mark.timeout(120)
def test_run_prints_gantt_and_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--nproc", "2", "--schedule", "gpipe", *SMALL]) == 0
    out = capsys.readouterr().out
    assert "rank 0 |" in out and "rank 1 |" in out
    assert "gradient check: max abs diff" in out and "(ok," in out
    assert "prediction (simulate on stage costs measured in isolation): predicted" in out


@pytest.mark.parametrize("argv, expected", [
    (["--nproc", "3", "--dp", "2"], "--dp must divide the 3 processes, got 2"),
    (["--schedule", "nope"], "--schedule must be one of"),
    (["--partition", "1,2,3"], "--partition has 3 entries, expected 2"),
    (["--batch-size", "2", "-m", "4"], "--batch-size must be >= the 4 microbatches, got 2"),
])
def test_run_rejects_bad_arguments_with_one_line(capsys: pytest.CaptureFixture[str], argv: list[str],
                                                 expected: str) -> None:
    assert main(["run", *argv]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1


@pytest.mark.timeout(180)
@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun not installed next to this Python")
def test_same_entry_runs_under_torchrun(tmp_path: Path) -> None:
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    completed = subprocess.run(
        [torchrun, "--standalone", "--nproc-per-node", "2", "-m", "pipeplan", "run", "--schedule", "1f1b",
         "--backend", "gloo", *SMALL, "--json"],
        capture_output=True, text=True, timeout=170, env=env, cwd=tmp_path,
    )
    assert completed.returncode == 0, completed.stderr[-2000:]
    report = json.loads(completed.stdout)
    assert report["config"]["world_size"] == 2
    assert report["gradient_check"]["ok"]

"""``pipeplan run``: spawned by itself and under torchrun, human and JSON output."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
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


def broken_model() -> tuple[Any, Any, Any]:
    """A user factory that fails, for ``--model test_runtime_cli:broken_model``."""
    raise RuntimeError("no weights here")


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
    assert {a["kind"] for a in report["measured"]["actions"]} == {"F", "I", "W"}
    assert len(report["config"]["layers_per_stage"]) == 2 and sum(report["config"]["layers_per_stage"]) == 4


@pytest.mark.timeout(180)
def test_run_user_model_with_dp_and_recompute_full(capsys: pytest.CaptureFixture[str]) -> None:
    report = _json_run(capsys, "--nproc", "4", "--dp", "2", "--schedule", "1f1b", "--recompute", "full",
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
    assert "prediction (layers measured on rank 0 before the run, no calibration" in out


@pytest.fixture
def no_spawn(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if ``pipeplan run`` starts any process."""
    import pipeplan.runtime

    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("pipeplan run started processes for an invalid command")

    monkeypatch.setattr(pipeplan.runtime, "spawn", refuse)


@pytest.mark.parametrize("argv, expected", [
    (["--nproc", "3", "--dp", "2"], "--dp must divide the 3 processes, got 2"),
    (["--nproc", "0"], "--nproc must be >= 1, got 0"),
    (["--nproc", "-2"], "--nproc must be >= 1, got -2"),
    (["--dp", "0"], "--dp must be >= 1, got 0"),
    (["--schedule", "nope"], "--schedule must be one of"),
    (["--partition", "1,2,3"], "--partition has 3 entries, expected 2"),
    (["--partition", "0,4"], "--partition entries must be >= 1 layer each, got '0,4'"),
    (["--partition", "3,x"], "--partition must be 'auto', 'even' or numbers like 3,4,3, got '3,x'"),
    (["--layers", "2", "--partition", "3,4"], "--partition 3,4 adds up to 7, but the model has 4 layers"),
    (["--model", "test_runtime_cli:tiny_model", "--partition", "3,4"],
     "--partition 3,4 adds up to 7, but the model has 5 layers"),
    (["--model", "test_runtime_cli:tiny_model", "--nproc", "6"],
     "the model has 5 layers, fewer than the 6 stages of 1f1b"),
    (["--batch-size", "2", "-m", "4"], "--batch-size must be >= the 4 microbatches (-m), got 2"),
    (["--timeout", "0"], "--timeout must be a number of seconds > 0, got 0.0"),
    (["--timeout", "-5"], "--timeout must be a number of seconds > 0, got -5.0"),
    (["--timeout", "nan"], "--timeout must be a number of seconds > 0, got nan"),
    (["--timeout", "inf"], "--timeout must be a number of seconds > 0, got inf"),
    (["--timeout", "1e-9"], "--timeout must be at least 1 second(s), got 1e-09: it bounds connecting the ranks"),
    (["--timeout", "0.01"], "--timeout must be at least 1 second(s), got 0.01"),
    (["--width", "0"], "--width must be >= 1, got 0"),
    (["--width", "20000"], "--width must be <= 10000 columns, got 20000"),
    (["--json", "--width", "50"], "--width does not apply with --json"),
    (["--schedule", "dual-rate", "--json", "--width", "50"], "--width does not apply with --json"),
    (["--steps", "100000"], "--steps must be <= 10000, got 100000"),
    (["--warmup", "100000"], "--warmup must be <= 10000, got 100000"),
    (["--model", "test_runtime_cli:tiny_model", "--layers", "12"],
     "--layers sets the built-in model's depth and does not apply to --model 'test_runtime_cli:tiny_model'"),
    (["--model", "nope"], "model must look like 'package.module:factory', got 'nope'"),
    (["--model", "no_such_module_xyz:build"], "cannot import module 'no_such_module_xyz': ModuleNotFoundError"),
    (["--model", "test_runtime_cli:no_such_factory"], "has no callable 'no_such_factory'"),
    (["--model", "test_runtime_cli:broken_model"],
     "--model 'test_runtime_cli:broken_model': the factory raised RuntimeError: no weights here"),
])
def test_run_rejects_bad_arguments_with_one_line(capfd: pytest.CaptureFixture[str], no_spawn: None,
                                                 argv: list[str], expected: str) -> None:
    assert main(["run", *argv]) == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert err.startswith("pipeplan run: error: ") and len(err.strip().splitlines()) == 1, err
    assert expected in err and "Traceback" not in err


def test_run_names_a_model_module_that_calls_sys_exit(capfd: pytest.CaptureFixture[str], no_spawn: None,
                                                       tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "exits_on_import.py").write_text("import sys\nsys.exit(3)\n")
    (tmp_path / "exits_in_factory.py").write_text("import sys\ndef build():\n    sys.exit('no GPU here')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert main(["run", "--model", "exits_on_import:f"]) == 2
    assert main(["run", "--model", "exits_in_factory:build"]) == 2
    out, err = capfd.readouterr()
    assert out == ""
    assert err.splitlines() == [
        "pipeplan run: error: --model 'exits_on_import:f': importing module 'exits_on_import' called sys.exit(3)",
        "pipeplan run: error: --model 'exits_in_factory:build': its factory called sys.exit('no GPU here')",
    ]


FAULTY = ["--model", "_fault_models:faulty_model", "--partition", "2,2", "--batch-size", "8", "-m", "4",
          "--steps", "1", "--warmup", "0"]


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_run_blames_the_rank_that_exited(capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PIPEPLAN_TEST_FAULT", "os_exit:1:2")  # rank 1's stage, its 3rd forward
    assert main(["run", *FAULTY, "--timeout", "20"]) == 2
    _out, err = capfd.readouterr()
    assert err.startswith("pipeplan run: error: rank 1 died with exit status 1 in F(stage 1, mb 2)"), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def _processes_in_group(group: int) -> list[int]:
    """Live (not zombie) processes whose process group is ``group``, from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) == group:
            found.append(int(entry.name))
    return found


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts processes through /proc")
def test_sigterm_to_run_ends_every_rank(tmp_path: Path) -> None:
    """End to end through a real ``pipeplan run`` process (SIGINT in-process: test_runtime_faults.py)."""
    signum = signal.SIGTERM
    marker = tmp_path / "stuck"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PIPEPLAN_TEST_FAULT": "hang:1:2",
           "PIPEPLAN_TEST_MARKER": str(marker),
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    # --timeout 600, longer than this test may take: ending within the test's 120 s proves the ranks were
    # ended at once, not at the run's timeout (no wall-clock bound of the test's own, which load could break)
    process = subprocess.Popen([sys.executable, "-m", "pipeplan", "run", *FAULTY, "--timeout", "600"], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        stop_by = time.monotonic() + 110  # this test's own timeout is 120 s
        deadline = time.monotonic() + 90
        while not marker.exists() and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.1)
        assert marker.exists(), process.communicate()[1]
        assert len(_processes_in_group(process.pid)) == 3  # the parent and its two ranks, one of them stuck
        process.send_signal(signum)
        _out, err = process.communicate(timeout=max(1.0, stop_by - time.monotonic()))
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 128 + signum
    name = signal.Signals(signum).name
    # exactly one line (no store errors from orphaned ranks); rank 0 is wherever it got to
    assert err.startswith(f"pipeplan run: interrupted by {name}; ended rank 0 in "), err
    assert err.endswith(", rank 1 in F(stage 1, mb 2)\n") and err.count("\n") == 1, err
    deadline = time.monotonic() + 30  # what outlives the parent a moment (its resource tracker) exits: on a
    while _processes_in_group(process.pid) and time.monotonic() < deadline:  # loaded machine, give it time
        time.sleep(0.1)
    assert _processes_in_group(process.pid) == []


def test_run_rejects_nccl_without_cuda(capfd: pytest.CaptureFixture[str], no_spawn: None,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert main(["run", "--backend", "nccl", "--layers", "2"]) == 2
    _out, err = capfd.readouterr()
    assert err == "pipeplan run: error: --backend nccl needs CUDA GPUs, and torch sees none here; use --backend gloo\n"


def test_run_rejects_nccl_with_fewer_gpus_than_processes(capfd: pytest.CaptureFixture[str], no_spawn: None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    assert main(["run", "--backend", "nccl", "--nproc", "2", "--layers", "2"]) == 2
    _out, err = capfd.readouterr()
    assert err.startswith("pipeplan run: error: --backend nccl needs one CUDA GPU per process: 2 processes but 1")
    assert len(err.strip().splitlines()) == 1


def _reference_with_grads() -> list[Any]:
    """tiny_model cut into stages [3, 2] after one backward, the frozen last bias without a gradient."""
    from pipeplan.models import split_sequential

    model, loss_fn, make_batch = tiny_model()
    model[4].bias.requires_grad_(False)
    inputs, targets = make_batch(6)
    loss_fn(model(inputs), targets).backward()
    return split_sequential(model, [3, 2])


def _runtime_grads(reference: list[Any]) -> dict[int, list[tuple[str, Any]]]:
    return {s: [(name, None if p.grad is None else p.grad.clone()) for name, p in stage.named_parameters()]
            for s, stage in enumerate(reference)}


def test_gradient_check_fails_when_the_runtime_left_a_gradient_unfilled() -> None:
    from pipeplan.runtime.loop import gradient_check as _gradient_check

    reference = _reference_with_grads()
    grads = _runtime_grads(reference)
    equal = _gradient_check([(0, grads)], reference)
    assert equal["ok"] and equal["max_abs_diff"] == 0 and equal["problems"] == []  # frozen bias: None on both

    grads[1] = [(name, None if name == "1.weight" else grad) for name, grad in grads[1]]
    missing = _gradient_check([(0, grads)], reference)
    assert not missing["ok"]
    assert missing["problems"] == [("stage 1: parameter '1.weight' has no gradient from the runtime, "
                                    "but one in the single-process step")]

    extra = _runtime_grads(reference)
    extra[1] = [(name, torch.zeros(2) if name == "1.bias" else grad) for name, grad in extra[1]]
    spurious = _gradient_check([(0, extra)], reference)
    assert not spurious["ok"] and "'1.bias' has a gradient from the runtime, but none" in spurious["problems"][0]

    poisoned = _runtime_grads(reference)
    poisoned[1] = [(name, torch.full_like(grad, float("nan")) if grad is not None else None)
                   for name, grad in poisoned[1]]
    nan = _gradient_check([(0, poisoned)], reference)
    assert not nan["ok"] and nan["max_abs_diff"] == float("inf")
    assert "non-finite gradient difference" in nan["problems"][0]


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


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(shutil.which("torchrun", path=str(Path(sys.executable).parent)) is None,
                    reason="torchrun not installed next to this Python")
@pytest.mark.parametrize("argv, fault, line", [
    (["--dp", "3"], "", "pipeplan run: error: --dp must divide the 2 processes, got 3"),
    # --timeout 10: it also bounds how long a rank waits for its peer to connect, and torchrun's ranks each
    # import torch on their own first: 3 s left a loaded machine too little room to start them both
    ([*FAULTY, "--timeout", "10"], "hang:1:2", "pipeplan run: error: rank 1 hung in F(stage 1, mb 2): no progress for "),
])
def test_torchrun_failures_print_pipeplans_line_once(tmp_path: Path, argv: list[str], fault: str, line: str) -> None:
    """A user error (found by every rank before it joins the group) and a hung rank, under torchrun.

    torchrun itself exits 1 and prints its ChildFailedError report whenever a rank
    exits non-zero; pipeplan's line is its "Root Cause" (through the error file).
    """
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent))
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PIPEPLAN_TEST_FAULT": fault,
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}
    completed = subprocess.run(
        [str(torchrun), "--standalone", "--nproc-per-node", "2", "-m", "pipeplan", "run", "--backend", "gloo", *argv],
        capture_output=True, text=True, timeout=110, env=env, cwd=tmp_path,
    )
    assert completed.returncode == 1, completed.stderr[-3000:]  # torchrun's own status for a failed rank
    ours = [text for text in completed.stderr.splitlines() if text.startswith("pipeplan run: error:")]
    assert len(ours) == 1 and ours[0].startswith(line), completed.stderr[:3000]
    root_cause = completed.stderr.split("Root Cause (first observed failure):")[1]
    assert "rank      : 0 (local_rank: 0)" in root_cause and "exitcode  : 2 " in root_cause
    assert f"traceback : {line}" in root_cause


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_run_with_a_profile_draws_predicted_over_measured(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    profile = tmp_path / "prof.json"
    assert main(["profile", "--layers", "2", "--batch-size", "10", "-m", "4", "--repeats", "3", "--warmup", "0",
                 "--max-spread", "1e9", "--nproc", "2", "--out", str(profile)]) == 0
    capsys.readouterr()
    plot, trace = tmp_path / "cmp.png", tmp_path / "cmp.json"
    assert main(["run", "--nproc", "2", "--schedule", "1f1b", *SMALL, "--profile", str(profile),
                 "--plot", str(plot), "--trace", str(trace)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert f"prediction (profile {profile}: as-run costs, calibrated messages and core sharing)" in out
    assert f"wrote {plot}\nwrote {trace}\n" in captured.err
    assert plot.read_bytes().startswith(b"\x89PNG")
    groups = {e["args"]["name"] for e in json.loads(trace.read_text())["traceEvents"] if e["name"] == "process_name"}
    assert groups == {"predicted", "measured"}


@pytest.mark.parametrize("argv, expected", [
    (["--profile", "missing.json"], "profile file 'missing.json' does not exist"),
    (["--plot", "cmp.jpg"], "--plot 'cmp.jpg' must end in .png, .svg, .pdf"),
])
def test_run_rejects_a_bad_profile_or_plot_path_before_spawning(argv: list[str], expected: str, no_spawn: None,
                                                                capfd: pytest.CaptureFixture[str]) -> None:
    assert main(["run", *argv]) == 2
    err = capfd.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_run_refuses_a_profile_of_another_model(tmp_path: Path, no_spawn: None,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    from pipeplan.layers import LayerProfile

    path = tmp_path / "three.json"
    LayerProfile([1.0, 1.0, 1.0]).to_file(path)
    assert main(["run", "--profile", str(path), "--layers", "2"]) == 2
    err = capfd.readouterr().err
    assert f"--profile {str(path)!r} has 3 layers, of unknown origin" in err and err.count("\n") == 1
    assert "the model this run builds (--model vla --layers 2) has 4: measure this model " \
           "(pipeplan profile --model vla --layers 2 --out PROFILE)" in err

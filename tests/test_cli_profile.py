"""``pipeplan profile`` and the verbs that read its file: partition, simulate --profile."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from pipeplan.cli import main  # noqa: E402
from pipeplan.layers import LayerProfile  # noqa: E402
from pipeplan.predict import predict  # noqa: E402
from pipeplan.schedules import build_schedule  # noqa: E402

TINY = ["--layers", "1", "--batch-size", "4", "-m", "2", "--repeats", "3", "--warmup", "0", "--max-spread", "1e9"]


@pytest.fixture(scope="module")
def profile_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("profile") / "prof.json"
    assert main(["profile", *TINY, "--nproc", "1", "--out", str(path)]) == 0
    return path


def test_profile_writes_a_file_the_library_reads(profile_file: Path) -> None:
    profile = LayerProfile.from_file(profile_file)
    assert profile.num_layers == 3 and profile.names[0] == "0:ImageEncoder"
    assert profile.backward_input is not None and profile.backward_input[0] == 0.0
    assert all(b > 0 for b in profile.send_bytes)
    assert profile.calibration is None  # one process: nothing to calibrate
    notes = profile.measurement
    assert notes["model"] == "vla" and notes["microbatch_size"] == 2 and notes["nproc"] == 1
    assert len(notes["loadavg_before"]) == 3
    assert json.loads(profile_file.read_text())["version"] == 2


def test_partition_and_simulate_read_the_profile(profile_file: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["partition", str(profile_file), "--stages", "2", "--json"]) == 0
    layers = json.loads(capsys.readouterr().out)["layers_per_stage"]
    assert sum(layers) == 3
    assert main(["simulate", "--profile", str(profile_file), "--partition", ",".join(map(str, layers)),
                 "-m", "4", "--schedule", "zb-h1", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    profile = LayerProfile.from_file(profile_file)
    expected = predict(profile, build_schedule("zb-h1", num_stages=2, num_microbatches=4), layers)
    assert payload["makespan"] == pytest.approx(expected.makespan)
    assert payload["layers_per_stage"] == layers
    assert main(["simulate", "--profile", str(profile_file), "--stages", "3", "--partition", "even", "-m", "2"]) == 0
    assert "layers per stage [1, 1, 1]" in capsys.readouterr().out


@pytest.mark.parametrize("argv, expected", [
    (["profile", "--out", "p.txt"], "--out must end in .json or .csv, got 'p.txt'"),
    (["profile", "--out", "p.json", "--max-spread", "0"], "--max-spread must be a number > 0"),
    (["profile", "--out", "p.json", "--nproc", "0"], "--nproc must be >= 1, got 0"),
    (["profile", "--out", "p.json", "--model", "nope"], "model must look like 'package.module:factory'"),
    (["profile", "--out", "p.json", "--repeats", "10000000000"], "--repeats must be <= 1000, got 10000000000"),
    (["profile", "--out", "p.json", "--warmup", "5000"], "--warmup must be <= 1000, got 5000"),
    (["simulate", "-m", "2"], "give --forward (stage times, ms), --profile (a layer profile file) or --preset/--spec"),
    (["simulate", "--profile", "missing.json", "--stages", "2"], "profile file 'missing.json' does not exist"),
])
def test_bad_arguments_are_one_line(argv: list[str], expected: str, capsys: pytest.CaptureFixture[str],
                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert expected in err and err.count("\n") == 1


def test_profile_file_errors_are_one_line(profile_file: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    future = tmp_path / "future.json"
    future.write_text(json.dumps({**json.loads(profile_file.read_text()), "version": 3}))
    assert main(["simulate", "--profile", str(future), "--stages", "2"]) == 2
    assert "has version 3; this pipeplan reads versions 1 and 2" in capsys.readouterr().err
    assert main(["simulate", "--profile", str(profile_file), "--partition", "2,2"]) == 2
    assert "adding up to the profile's 3 layers" in capsys.readouterr().err
    assert main(["partition", str(future), "--stages", "2"]) == 2
    assert "version 3" in capsys.readouterr().err


def test_a_spread_too_large_is_refused_with_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["profile", *TINY[:-2], "--max-spread", "1e-12", "--nproc", "1", "--out", str(tmp_path / "p.csv")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "too noisy to trust" in err and err.count("\n") == 1
    # the refusal names the ways out (issue 24, item 6)
    assert "--statistic min" in err and "raise --max-spread (now 1e-12; this layer needs" in err
    assert not (tmp_path / "p.csv").exists()


def _without_load_warning(err: str, path: Path) -> str:
    """stderr less the one line a profile measured on a loaded machine adds (this one may be loaded)."""
    warning = f"warning: profile {path}: core sharing measured under other jobs' load"
    return "".join(line for line in err.splitlines(keepends=True) if not line.startswith(warning))


def test_min_is_not_judged_by_the_spread_and_the_header_says_what_was_kept(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # issue 24, item 6: --statistic min, pitched for shared machines, no longer hits the spread refusal
    path = tmp_path / "p.json"
    argv = ["profile", *TINY[:-2], "--nproc", "1", "--out", str(path)]
    assert main([*argv, "--statistic", "min", "--max-spread", "1e-12"]) == 2  # min checks no spread: refused
    assert "--max-spread does not apply with --statistic min" in capsys.readouterr().err
    assert main([*argv, "--statistic", "min"]) == 0
    captured = capsys.readouterr()
    assert "min of 3 runs" in captured.out and "median" not in captured.out
    assert _without_load_warning(captured.err, path) == f"wrote {path}\n"
    assert LayerProfile.from_file(path).measurement["statistic"] == "min"
    assert main(["profile", *TINY, "--nproc", "1", "--out", str(path)]) == 0
    assert "median of 3 runs ± IQR" in capsys.readouterr().out


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_profile_calibrates_the_processes_it_is_for(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "prof.csv"
    assert main(["profile", *TINY, "--nproc", "2", "--out", str(path)]) == 0
    captured = capsys.readouterr()
    out = captured.out
    assert "calibration (gloo, 2 processes" in out and _without_load_warning(captured.err, path) == f"wrote {path}\n"
    assert "inf" not in out and "bandwidth " in out  # units.format_bandwidth, reason given when unbounded
    profile = LayerProfile.from_file(path)
    calibration = profile.calibration
    assert calibration is not None and calibration.backend == "gloo"
    assert len(calibration.slowdown) == 2 and calibration.slowdown[0] == 1.0 and calibration.slowdown[1] > 0
    assert {size for size, _ms in calibration.samples} >= {4.0, max(profile.send_bytes)}
    assert LayerProfile.from_file(path) == profile


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_gpu_check_dry_run_plans_every_step() -> None:
    script = Path(__file__).resolve().parent.parent / "benchmarks" / "gpu_check.sh"
    result = subprocess.run(["bash", str(script), "--dry-run"], capture_output=True, text=True, timeout=230,
                            env={"PYTHON": sys.executable, "GPU_CHECK_LOG": "/dev/null", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stdout + result.stderr
    for needle in ("pipeplan calibrate --out gpu_device.json", "benchmarks/device_step.py --device gpu_device.json",
                   "tests/test_runtime_gpu.py", "benchmarks/fidelity.py --backend nccl",
                   "benchmarks/rebalance.py --backend nccl", "dry run: ok"):
        assert needle in result.stdout
    # The calibration runs first: the device file exists before the step planned on it.
    assert result.stdout.index("pipeplan calibrate") < result.stdout.index("device_step.py") \
        < result.stdout.index("tests/test_runtime_gpu.py")

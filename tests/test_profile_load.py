"""A profile measured under other jobs' load says so, where it is measured and where it is used."""

from __future__ import annotations

import pytest

from pipeplan.calibration import INFLATED_SHARING, LOAD_MARGIN, Calibration, load_warning
from pipeplan.layers import LayerProfile


def _notes(load: float, *, cores: int = 4, nproc: int = 2, threads: int = 1) -> dict[str, object]:
    return {"loadavg_before": [load, load, load], "cpu_count": cores, "nproc": nproc, "threads_per_process": threads}


def test_an_idle_machine_gets_no_warning() -> None:
    assert load_warning(_notes(0.3), Calibration(slowdown=(1.0, 1.05))) is None
    # own processes fill the cores: sharing they explain is no warning
    assert load_warning(_notes(0.2, cores=2, nproc=4), Calibration(slowdown=(1.0, 1.5, 1.6, 2.1))) is None


def test_a_load_above_the_free_cores_is_named() -> None:
    free = 4 - 2  # cores left by the profile's own 2 × 1 threads
    assert load_warning(_notes(free + LOAD_MARGIN - 0.01), None) is None
    line = load_warning(_notes(free + LOAD_MARGIN + 0.5), None)
    assert line is not None and "others' load average 3.0 on 4 core(s) before measuring" in line
    assert "re-run pipeplan profile" in line and "\n" not in line


def test_the_load_before_the_calibration_counts_less_the_measuring_process() -> None:
    notes = {**_notes(0.2), "loadavg_calibration": [1.4, 1.0, 0.5]}  # 1 of it the measuring process's own thread
    assert load_warning(notes, None) is None
    notes["loadavg_calibration"] = [4.5, 3.0, 2.0]  # 3.5 others' on 4 cores, 2 of them left free
    line = load_warning(notes, None)
    assert line is not None and "others' load average 3.5 on 4 core(s) besides its own before the calibration" in line


def test_an_inflated_sharing_factor_is_named() -> None:
    # 2 processes × 1 thread on 4 cores explain x1.00; a 2-core machine x1.00 too
    assert load_warning(_notes(0.0), Calibration(slowdown=(1.0, INFLATED_SHARING - 0.01))) is None
    line = load_warning(_notes(0.0), Calibration(slowdown=(1.0, 2.1)))
    assert line is not None and "sharing x2.10 with 2 busy" in line and "explain x1.00" in line
    # 8 threads on 4 cores explain x2: x2.5 is not inflated, x3.5 is
    assert load_warning(_notes(0.0, nproc=2, threads=4), Calibration(slowdown=(1.0, 2.5))) is None
    assert load_warning(_notes(0.0, nproc=2, threads=4), Calibration(slowdown=(1.0, 3.5))) is not None


def test_a_profile_without_the_notes_gets_none() -> None:
    assert load_warning({}, Calibration(slowdown=(1.0, 9.0))) is None
    assert load_warning({"cpu_count": "many", "nproc": 2}, None) is None


def _loaded_profile(tmp_path) -> str:
    path = str(tmp_path / "prof.json")
    profile = LayerProfile.uniform(8, forward=1.0).replaced(
        calibration=Calibration(slowdown=(1.0, 2.2)), measurement=_notes(5.0, cores=2))
    profile.to_file(path)
    return path


@pytest.mark.parametrize("extra", [("--schedule", "1f1b"), ("--schedules", "1f1b,zb-h1")])
def test_simulate_profile_warns_once_on_stderr(run_cli, tmp_path, extra) -> None:
    path = _loaded_profile(tmp_path)
    status, out, err = run_cli("simulate", "--profile", path, "--stages", "2", "--json", *extra)
    assert status == 0, err
    assert err.count("warning: profile") == 1 and "core sharing measured under other jobs' load" in err
    assert "warning" not in out


def test_run_warns_once_the_run_is_accepted(tmp_path, capfd, monkeypatch) -> None:
    from pipeplan.cli import main

    path = _loaded_profile(tmp_path)  # 8 layers: the built-in model with --layers 6 (an encoder and a head more)

    def no_run(*_args, **_kwargs):
        raise SystemExit(7)  # stands in for spawning the ranks: the warning must come before it

    monkeypatch.setattr("pipeplan.runtime.spawn", no_run)
    with pytest.raises(SystemExit) as stopped:
        main(["run", "--profile", path, "--layers", "6", "--nproc", "2"])
    assert stopped.value.code == 7  # it got as far as spawning the ranks
    err = capfd.readouterr().err
    assert err.count("core sharing measured under other jobs' load") == 1
    # refused (a profile of another model): the one line, no warning
    assert main(["run", "--profile", path, "--layers", "2", "--nproc", "2"]) == 2
    err = capfd.readouterr().err
    assert err.count("\n") == 1 and "warning" not in err


def test_a_refused_simulate_is_one_line_without_the_warning(run_cli, tmp_path) -> None:
    path = _loaded_profile(tmp_path)
    for extra in (("--schedule", "1f1b"), ("--schedules", "all")):
        status, _out, err = run_cli("simulate", "--profile", path, "--partition", "3,3", *extra)
        assert status == 2 and err.count("\n") == 1 and "warning" not in err


def test_an_unloaded_profile_prints_nothing(run_cli, tmp_path) -> None:
    path = str(tmp_path / "prof.json")
    LayerProfile.uniform(8, forward=1.0).replaced(calibration=Calibration(slowdown=(1.0, 1.02)),
                                                  measurement=_notes(0.1)).to_file(path)
    status, _out, err = run_cli("simulate", "--profile", path, "--stages", "2", "--json")
    assert status == 0 and "warning" not in err

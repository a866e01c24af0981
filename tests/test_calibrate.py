"""``pipeplan calibrate`` on torch's CPU kernels, and ``plan``/``model``/``partition --device`` reading its file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeplan.hardware.device_file import device_fields, read_device, write_device
from pipeplan.hardware.fit import Timings, device_from_timings


pytest.importorskip("torch")


@pytest.fixture
def calibrated(tmp_path: Path, run_cli: Any) -> tuple[Path, str]:
    path = tmp_path / "device.json"
    # --repeats 7: medians that hold on a machine other tests load; the quick CPU grid is ~0.1 s a pass.
    # A timing the load made non-monotone is refused by design ("re-run on an idle machine"): run it again,
    # at most three times, as a user would; any other refusal fails at once.
    for _ in range(3):
        status, out, err = run_cli("calibrate", "--quick", "--repeats", "7", "--out", str(path))
        if not (status == 2 and "non-monotone" in err):
            break
    assert status == 0, err
    assert err == f"wrote {path}\n"  # on stderr, like every verb's files
    return path, out


def test_calibrate_writes_a_file_that_reads_back_equal(calibrated: tuple[Path, str], tmp_path: Path) -> None:
    path, out = calibrated
    loaded = read_device(path)
    timings = Timings.from_dict(loaded.measurement["timings"])
    # The file's device is the fit of the raw timings it keeps, and survives another write and read.
    assert loaded.device == device_from_timings(timings)
    again = read_device(write_device(tmp_path / "again.json", loaded.device, p2p=loaded.p2p,
                                     measurement=loaded.measurement))
    assert again == loaded
    device = loaded.device
    assert device.name == "cpu" and timings.device_name == "cpu" and timings.dtype == "float32"
    assert {16, 64, 256, 1024, 4096, 8192} <= {p.m for p in device.gemm_table}
    assert 0 < device.gemm_efficiency <= 1 and 0 < device.memory_efficiency <= 1
    assert 0 < device.attention_efficiency <= 1 and device.launch_overhead_ms > 0
    assert {m.kernel for m in timings.memory} == {"copy", "add", "layer_norm", "dropout"}
    assert 0 < device.random_efficiency <= 1 and "random_efficiency" in device.sources
    assert {a.causal for a in timings.attention} == {False, True}
    # Two gloo processes timed the message sweep: a latency and a finite bandwidth.
    assert loaded.p2p is not None and loaded.p2p.bandwidth > 0 and len(timings.p2p) >= 3
    assert "GEMM" in out and "TFLOP/s" in out and "p2p:" in out
    assert " GB/s" in out or " MB/s" in out  # bandwidths through units.format_bandwidth


def test_no_p2p_leaves_the_link_out(tmp_path: Path, run_cli: Any) -> None:
    path = tmp_path / "d.json"
    status, _out, err = run_cli("calibrate", "--quick", "--no-p2p", "--repeats", "5", "--out", str(path))
    assert status == 0, err
    loaded = read_device(path)
    assert loaded.p2p is None and loaded.measurement["timings"]["p2p"] == []


def test_model_and_plan_use_the_device_file(calibrated: tuple[Path, str], run_cli: Any) -> None:
    path, _out = calibrated
    device = read_device(path).device
    status, out, err = run_cli("model", "--preset", "gpt-1.5b", "--device", str(path), "--json")
    assert status == 0, err
    model = json.loads(out)
    assert model["device"] == device_fields(device)
    _status, preset_out, _err = run_cli("model", "--preset", "gpt-1.5b", "--gpu", "h100-80g", "--json")
    # The calibrated CPU is orders of magnitude slower than an H100: the layer times follow the file.
    assert model["layers"][1]["forward"] > 50 * json.loads(preset_out)["layers"][1]["forward"]
    held = device.memory_bytes  # --memory may not exceed what the file's device holds (this machine's RAM)
    status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--device", str(path), "--gpus", "2",
                               "--global-batch", "4", "--pp", "2", "--micro-batch-size", "1",
                               "--schedules", "1f1b", "--memory", f"{held * 1.01:.0f}B", "--json")
    assert status == 2 and "is more than a" in err
    status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--device", str(path), "--gpus", "2",
                               "--global-batch", "4", "--pp", "2", "--micro-batch-size", "1",
                               "--schedules", "1f1b", "--headroom", "0", "--json")
    assert status == 0, err
    plan = json.loads(out)
    assert plan["device"] == device_fields(device)


def test_plan_takes_the_files_link_inside_a_node(calibrated: tuple[Path, str]) -> None:
    import argparse

    from pipeplan.cli.plan_cmd import _cluster

    path, _out = calibrated
    loaded = read_device(path)
    args = argparse.Namespace(device=str(path), gpu="h100-80g", mfu=None, gpus=2, intra_link=None,
                              inter_link="ib-ndr", gpus_per_node=8)
    cluster = _cluster(args)
    assert cluster.device == loaded.device and cluster.intra_node == loaded.p2p
    cluster = _cluster(argparse.Namespace(**{**vars(args), "intra_link": "pcie-gen4"}))
    assert cluster.intra_node.name == "pcie-gen4"  # an explicit --intra-link wins over the file


def test_partition_uses_the_device_file(calibrated: tuple[Path, str], run_cli: Any) -> None:
    path, _out = calibrated
    status, slow, err = run_cli("partition", "--preset", "gpt-1.5b", "--stages", "2", "--device", str(path), "--json")
    assert status == 0, err
    status, fast, err = run_cli("partition", "--preset", "gpt-1.5b", "--stages", "2", "--json")
    assert status == 0, err
    assert json.loads(slow) != json.loads(fast)


def test_calibrate_refuses_an_unwritable_out_before_timing(tmp_path: Path, run_cli: Any) -> None:
    status, out, err = run_cli("calibrate", "--quick", "--out", str(tmp_path / "no" / "d.json"))
    assert status == 2 and out == "" and len(err.strip().splitlines()) == 1 and "does not exist" in err

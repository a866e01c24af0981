"""Device files: the round trip, and one line naming the field for every bad file (library and CLI)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeplan import hardware
from pipeplan.hardware.device_file import FORMAT, VERSION, device_fields, parse_device, read_device, write_device
from pipeplan.errors import InvalidInputError

from _devices import example_device



def _payload(**device_changes: Any) -> dict[str, Any]:
    device = device_fields(example_device())
    for key, value in device_changes.items():
        if value is _DROP:
            device.pop(key)
        else:
            device[key] = value
    return {"format": FORMAT, "version": VERSION, "device": device, "p2p": {"latency_ms": 0.01, "bandwidth": 4e10},
            "measurement": {"torch": "2.x"}}


_DROP = object()


def test_round_trip_keeps_every_field_and_the_link(tmp_path: Path) -> None:
    device = example_device()
    link = hardware.Link(name="x", latency_ms=0.012, bandwidth=4.1e10)
    path = write_device(tmp_path / "d.json", device, p2p=link, measurement={"repeats": 5})
    loaded = read_device(path)
    assert loaded.device == device
    assert loaded.p2p is not None and (loaded.p2p.latency_ms, loaded.p2p.bandwidth) == (0.012, 4.1e10)
    assert loaded.measurement == {"repeats": 5}
    assert json.loads(path.read_text())["device"]["gemm_table"][1] == [8192, 4096, 4096, 0.74]


def test_a_file_without_p2p_reads_as_none(tmp_path: Path) -> None:
    path = write_device(tmp_path / "d.json", example_device())
    assert read_device(path).p2p is None


@pytest.mark.parametrize(("change", "needle"), [
    ({"format": "pipeplan-profile"}, "format must be 'pipeplan-device'"),
    ({"version": 2}, "version must be 1"),
    ({"version": True}, "version must be 1"),
    ({"extra": 1}, "unknown field(s) extra"),
    ({"p2p": {"latency_ms": 0.01}}, "p2p is missing bandwidth"),
    ({"p2p": {"latency_ms": -1, "bandwidth": 1e9}}, "p2p.latency_ms must be >= 0"),
    ({"p2p": {"latency_ms": 0.0, "bandwidth": 0}}, "p2p.bandwidth must be > 0"),
    ({"measurement": [1, 2]}, "measurement must be an object"),
])
def test_bad_top_level_is_one_line_naming_the_field(change: dict[str, Any], needle: str) -> None:
    payload = {**_payload(), **change}
    with pytest.raises(InvalidInputError) as error:
        parse_device(payload, where="device file 'd.json'")
    message = str(error.value)
    assert needle in message and "\n" not in message and message.startswith("device file 'd.json'")


@pytest.mark.parametrize(("field", "value", "needle"), [
    ("gemm_efficiency", 0.0, "device.gemm_efficiency must be in (0, 1]"),
    ("attention_efficiency", 1.2, "device.attention_efficiency must be in (0, 1]"),
    ("memory_efficiency", -0.5, "device.memory_efficiency must be in (0, 1]"),
    ("achievable_fraction", 1.5, "device.achievable_fraction must be in (0, 1]"),
    ("peak_flops", 0, "device.peak_flops must be > 0"),
    ("peak_flops", "1e15", "device.peak_flops must be a finite number"),
    ("memory_bandwidth", -3e12, "device.memory_bandwidth must be > 0"),
    ("memory_bytes", 0, "device.memory_bytes must be > 0"),
    ("launch_overhead_ms", -0.001, "device.launch_overhead_ms must be >= 0"),
    ("num_sms", 0, "device.num_sms must be an integer >= 1"),
    ("gemm_tile", [128], "device.gemm_tile must be [rows, cols]"),
    ("gemm_table", [[16, 4096, 4096]], "device.gemm_table[0] must be [m, n, k, efficiency]"),
    ("gemm_table", [[16, 4096, 4096, 1.5]], "device.gemm_table[0].efficiency must be in (0, 1]"),
    ("gemm_table", [[0, 4096, 4096, 0.5]], "device.gemm_table[0].m must be an integer >= 1"),
    ("gemm_efficiency", _DROP, "device is missing gemm_efficiency"),
    ("peak_flops", _DROP, "device is missing peak_flops"),
    ("turbo", 1, "device has unknown field(s) turbo"),
])
def test_bad_device_field_is_one_line_naming_it(field: str, value: Any, needle: str) -> None:
    with pytest.raises(InvalidInputError) as error:
        parse_device(_payload(**{field: value}), where="device file 'd.json'")
    assert needle in str(error.value) and "\n" not in str(error.value)


def test_files_that_are_not_device_files(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "list.json").write_text("[1, 2]")
    for name, needle in (("bad.json", "is not valid JSON"), ("list.json", "must hold a JSON object"),
                         ("missing.json", "does not exist")):
        with pytest.raises(InvalidInputError, match=needle):
            read_device(tmp_path / name)


@pytest.mark.parametrize("verb", [("model", "--preset", "gpt-1.5b"),
                                  ("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "16"),
                                  ("partition", "--preset", "gpt-1.5b", "--stages", "2")])
@pytest.mark.parametrize(("field", "value"), [("version", 2), ("gemm_efficiency", 1.5), ("memory_bytes", 0),
                                              ("gemm_efficiency", _DROP)])
def test_cli_refuses_a_bad_device_file_in_one_line(tmp_path: Path, run_cli: Any, verb: tuple[str, ...],
                                                   field: str, value: Any) -> None:
    payload = {**_payload(), "version": value} if field == "version" else _payload(**{field: value})
    path = tmp_path / "device.json"
    path.write_text(json.dumps(payload))
    status, out, err = run_cli(*verb, "--device", str(path))
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and str(path) in err and "Traceback" not in err

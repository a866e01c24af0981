"""Layer profiles: constructors, files, transformer shapes and the stage costs they give."""

from __future__ import annotations

import json

import pytest

from pipeplan import InvalidInputError
from pipeplan.layers import LayerProfile, transformer_layer_flops


def test_defaults_follow_the_stage_costs_convention():
    profile = LayerProfile([1.0, 2.0])
    assert profile.backward == (2.0, 4.0)
    assert profile.weight == (1.0, 2.0)
    assert profile.activation_bytes == (0.0, 0.0)
    assert profile.params == (0.0, 0.0)
    assert profile.names == ("layers.0", "layers.1")
    assert list(profile.total) == [3.0, 6.0]


def test_from_costs_splits_one_to_two():
    profile = LayerProfile.from_costs([3.0, 6.0])
    assert profile.forward == (1.0, 2.0)
    assert profile.backward == (2.0, 4.0)


def test_stage_costs_sum_layers_and_split_extras():
    profile = LayerProfile(
        [1.0, 2.0, 3.0],
        [2.0, 4.0, 6.0],
        [0.5, 1.0, 1.5],
        activation_bytes=[10, 20, 30],
        first_extra=3.0,
        last_extra=6.0,
    )
    costs = profile.stage_costs([2, 1])
    assert costs.forward == (1.0 + 2.0 + 1.0, 3.0 + 2.0)
    assert costs.backward == (2.0 + 4.0 + 2.0, 6.0 + 4.0)
    assert costs.weight == (0.5 + 1.0 + 1.0, 1.5 + 2.0)
    assert costs.activation_bytes == (30.0, 30.0)
    # F + B of each stage is the partition's stage time
    assert [f + b for f, b in zip(costs.forward, costs.backward)] == [12.0, 15.0]
    with pytest.raises(InvalidInputError, match="summing to 3"):
        profile.stage_costs([1, 1])


def test_transformer_shapes():
    h, s, b, heads, layers = 1024, 2048, 2, 16, 24
    profile = LayerProfile.from_transformer(
        num_layers=layers, hidden_size=h, num_heads=heads, seq_length=s, micro_batch_size=b, throughput=1e14
    )
    assert profile.num_layers == layers
    # Narayanan et al. 2021: 24 b s h^2 + 4 b s^2 h forward FLOPs per layer (f = 4h)
    flops = 24 * b * s * h * h + 4 * b * s * s * h
    assert transformer_layer_flops(hidden_size=h, seq_length=s, micro_batch_size=b) == flops
    assert profile.forward[0] == pytest.approx(1e3 * flops / 1e14)
    assert profile.backward[0] == pytest.approx(2 * profile.forward[0])
    assert profile.params[0] == 12 * h * h + 13 * h
    # Korthikanti et al. 2022: s b h (34 + 5 a s / h) bytes per layer
    assert profile.activation_bytes[0] == pytest.approx(s * b * h * (34 + 5 * heads * s / h))


def test_transformer_with_vocabulary_and_tensor_parallel():
    profile = LayerProfile.from_transformer(
        num_layers=4, hidden_size=64, num_heads=4, seq_length=32, micro_batch_size=1,
        throughput=1e12, vocab_size=1000, tensor_parallel=2,
    )
    assert profile.names[0] == "embedding" and profile.names[-1] == "output_layer"
    assert profile.num_layers == 6
    assert profile.params[0] == 1000 * 64 / 2
    assert profile.forward[-1] > profile.forward[1]  # the logits dominate at this size


def test_csv_round_trip(tmp_path):
    path = tmp_path / "profile.csv"
    path.write_text(
        "name,forward,backward,activation_bytes,params\n"
        "vision,30,60,100,5\n"
        "block0,2,4,10,1\n"
        "head,1,2,3,0\n"
    )
    profile = LayerProfile.from_file(path)
    assert profile.names == ("vision", "block0", "head")
    assert profile.forward == (30.0, 2.0, 1.0)
    assert profile.weight == (30.0, 2.0, 1.0)
    assert profile.params == (5.0, 1.0, 0.0)


def test_json_object_with_extras(tmp_path):
    path = tmp_path / "profile.json"
    path.write_text(json.dumps({
        "layers": [{"forward": 1}, {"forward": 2, }],
        "first_extra": 16,
        "last_extra_bytes": 8,
    }))
    profile = LayerProfile.from_file(path)
    assert profile.forward == (1.0, 2.0)
    assert profile.first_extra == 16.0 and profile.last_extra_bytes == 8.0
    again = tmp_path / "again.json"
    again.write_text(json.dumps(profile.to_records()))
    assert LayerProfile.from_file(again).forward == profile.forward


@pytest.mark.parametrize(
    "name,text,match",
    [
        ("p.csv", "forward\n1\nx\n", r"p.csv', layer 1 \(layers.1\): forward must be a number"),
        ("p.csv", "forward,backward\n1,2\n1,\n", r"layer 1 \(layers.1\) lacks 'backward'"),
        ("p.json", "[{\"forward\": 1, \"speed\": 3}]", "unknown keys"),
        ("p.json", "[{\"name\": \"embed\", \"backward\": 1}]", r"layer 0 \(embed\) needs a 'forward'"),
        ("p.json", "{\"layer\": []}", "needs 'layers'"),
        ("p.json", "{not json", "not valid JSON"),
        ("p.txt", "forward\n1\n", "must end in .csv or .json"),
        # the file, the layer by index and name, the field; never a stage's sum (issue 24, item 1)
        ("p.csv", "name,forward,backward,weight\nvit,1,2,3\n",
         r"^profile file '.*p.csv', layer 0 \(vit\): weight = 3.0 must be <= backward = 2.0 .*backward_input"),
    ],
)
def test_bad_files_name_the_problem(tmp_path, name, text, match):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        LayerProfile.from_file(path)


def test_missing_file_and_bad_values():
    with pytest.raises(InvalidInputError, match="does not exist"):
        LayerProfile.from_file("/nonexistent/profile.csv")
    with pytest.raises(InvalidInputError, match=r"forward\[0\] must be > 0"):
        LayerProfile([0.0])
    with pytest.raises(InvalidInputError, match="names must be a list of 2"):
        LayerProfile([1.0, 1.0], names=["a"])
    with pytest.raises(InvalidInputError, match="first_extra must be a finite number >= 0"):
        LayerProfile([1.0], first_extra=-1)
    with pytest.raises(InvalidInputError, match="unknown extras"):
        LayerProfile([1.0]).with_extras(middle_extra=1.0)


def test_stage_costs_keep_weight_within_backward_despite_rounding():
    # layer 1 is all weight gradient (weight == backward); its prefix sums round apart:
    # 0.1 + 0.2 − 0.1 = 0.20000000000000004 > 0.2 + 0.2 − 0.2
    profile = LayerProfile([1.0, 1.0], [0.2, 0.2], [0.1, 0.2])
    costs = profile.stage_costs([1, 1])
    assert costs.weight[1] <= costs.backward[1]
    assert costs.weight[1] == pytest.approx(0.2)

# ------------------------------------------------------------ profile files, version 2
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from pipeplan.calibration import Calibration  # noqa: E402
from pipeplan.layers import PROFILE_VERSION  # noqa: E402

_times = st.floats(min_value=1e-9, max_value=1e6, allow_nan=False, allow_infinity=False)
_sizes = st.floats(min_value=0.0, max_value=1e12, allow_nan=False, allow_infinity=False)


def measured_profile(count: int = 3, *, seed_values: tuple[float, ...] = (0.1, 1.0 / 3.0, 2.5)) -> LayerProfile:
    values = [seed_values[i % len(seed_values)] * (i + 1) for i in range(count)]
    return LayerProfile(
        values,
        [2 * v for v in values],
        [1.1 * v for v in values],
        backward_input=[0.0] + [0.9 * v for v in values[1:]],
        activation_bytes=[1e6 * (i + 1) for i in range(count)],
        params=[1000.0 * i for i in range(count)],
        send_bytes=[4096.0 * (i + 1) for i in range(count)],
        names=[f"layer,{i} \"quoted\"" for i in range(count)],
        spread={"forward": [v / 10 for v in values], "weight": [0.0] * count},
        first_extra=1.25,
        last_extra_bytes=7.0,
        calibration=Calibration(latency=0.123, bandwidth=2.5e6, slowdown=(1.0, 1.87, 2.9), backend="gloo",
                                samples=((4.0, 0.12), (16384.0, 0.13))),
        measurement={"model": "vla", "loadavg_before": [0.5, 0.4, 0.3], "threads_per_process": 1},
    )


@pytest.mark.parametrize("suffix", [".json", ".csv"])
def test_version_2_files_round_trip_exactly(tmp_path, suffix):
    profile = measured_profile()
    path = tmp_path / f"prof{suffix}"
    profile.to_file(path)
    again = LayerProfile.from_file(path)
    assert again == profile  # every field, floats bit for bit, calibration and notes included
    assert again.calibration.slowdown == (1.0, 1.87, 2.9)


@given(values=st.lists(st.tuples(_times, _times, _times, _times, _sizes), min_size=1, max_size=6),
       suffix=st.sampled_from([".json", ".csv"]))
def test_any_measured_profile_round_trips(tmp_path_factory, values, suffix):
    profile = LayerProfile(
        [v[0] for v in values], [v[1] for v in values], [v[2] for v in values],
        backward_input=[v[3] for v in values], send_bytes=[v[4] for v in values],
        spread={"backward_input": [v[3] / 3 for v in values]},
    )
    path = tmp_path_factory.mktemp("round") / f"p{suffix}"
    profile.to_file(path)
    assert LayerProfile.from_file(path) == profile


def test_version_2_json_says_what_it_is(tmp_path):
    path = tmp_path / "prof.json"
    measured_profile().to_file(path)
    payload = json.loads(path.read_text())
    assert payload["format"] == "pipeplan-profile" and payload["version"] == PROFILE_VERSION
    assert payload["layers"][1]["backward_input"] == pytest.approx(0.9 * 2 / 3.0)
    assert path.with_suffix(".json").read_text().startswith("{")


@pytest.mark.parametrize(
    "text,match",
    [
        ('{"format": "pipeplan-profile", "version": 3, "layers": [{"forward": 1}]}', "has version 3; this pipeplan "
                                                                                       "reads versions 1 and 2"),
        ('{"version": 2, "layers": [{"forward": 1}], "speed": 1}', "may have"),
        ('{"version": 2}', "needs 'layers'"),
        ('{"version": 2, "format": "other", "layers": [{"forward": 1}]}', "'format' must be"),
        ('{"version": 2, "layers": [{"forward": 1}], "calibration": {"latency": 1}}', "calibration lacks"),
        ('{"version": 2, "layers": [{"forward": 1}, {"forward": 2, "backward_input": 1}]}',
         r"layer 0 \(layers.0\) lacks 'backward_input'"),
        ('{"version": 2, "layers": [{"forward": 1, "backward_input": -1}]}', r"layer 0 \(layers.0\): backward_input must be >= 0"),
    ],
)
def test_bad_version_2_files_name_the_problem(tmp_path, text, match):
    path = tmp_path / "p.json"
    path.write_text(text)
    with pytest.raises(InvalidInputError, match=match):
        LayerProfile.from_file(path)


def test_bad_csv_header_line(tmp_path):
    path = tmp_path / "p.csv"
    path.write_text("# pipeplan-profile {not json\nforward\n1\n")
    with pytest.raises(InvalidInputError, match="not valid JSON"):
        LayerProfile.from_file(path)
    path.write_text("# something else\nforward\n1\n")
    with pytest.raises(InvalidInputError, match="first line must be"):
        LayerProfile.from_file(path)


def test_measured_split_stage_costs_follow_the_runtime():
    profile = LayerProfile([1, 1, 1, 1], [2, 2, 2, 2], [1.5, 1.5, 1.5, 1.5], backward_input=[0, 1.2, 1.2, 1.2],
                           send_bytes=[10, 20, 30, 40])
    costs = profile.stage_costs([2, 2])
    # stage 0: the data needs no gradient, so its I is free and its W runs its whole backward
    assert costs.backward_input == pytest.approx((0.0, 2.4))
    assert costs.weight == (4.0, 3.0)
    assert costs.duration("I", 1, 0) == pytest.approx(2.4)
    assert costs.duration("W", 1, 0) == 3.0
    assert costs.duration("B", 1, 0) == 4.0  # the full backward as measured
    assert profile.boundary_bytes([2, 2]) == (20.0,)
    assert profile.boundary_bytes([1, 2, 1]) == (10.0, 30.0)


def test_a_measured_split_keeps_a_weight_half_longer_than_the_full_backward():
    # the runtime's split pays a second traversal: W alone may exceed the full backward
    profile = LayerProfile([1.0, 1.0], [1.0, 1.0], [1.2, 1.4], backward_input=[0.0, 1.1])
    costs = profile.stage_costs([1, 1])
    assert costs.weight[1] == pytest.approx(1.4) and costs.backward_input[1] == pytest.approx(1.1)

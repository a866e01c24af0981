"""Megatron-LM's full recompute by method, ``block:N`` and ``uniform:N``, priced per pipeline stage.

``--recompute-granularity full --recompute-method block --recompute-num-layers N`` checkpoints the first N
transformer layers of each stage (each virtual chunk) and leaves the rest alone; ``--recompute-method uniform``
checkpoints groups of N layers, keeping each group's input only (megatron/core/transformer/transformer_block.py
``_checkpointed_forward``; tests/test_engines_megatron.py runs megatron-core's own function against
``stage_layer_modes``). Here: the stage costs are those layers' costs under ``full`` and ``none``, the split moves
which layers recompute, the planner and the CLI price them, and engines without them refuse them in one line.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeplan import hardware, presets
from pipeplan.errors import InvalidInputError
from pipeplan.models.layer_costs import layer_costs, stage_layer_modes
from pipeplan.plan import check_recompute, recompute_rank, stage_recompute
from pipeplan.planner import Workload

H100 = hardware.device("h100-80g")
SPEC = presets.get("gpt-1.5b")  # the embedding, 22 decoder layers, the LM head: 24 pipeline layers


@pytest.fixture(scope="module")
def work() -> Workload:
    return Workload.from_spec(SPEC, H100, tensor_parallel=2)


def _per_layer(work: Workload, mode: str, size: int = 2):
    profile = work.with_recompute(mode).profile(size, mode)
    return np.asarray(profile.backward), np.asarray(profile.activation_bytes)


def test_the_modes_and_their_order():
    assert stage_recompute("block:3") == ("block", 3) and stage_recompute("uniform:2") == ("uniform", 2)
    assert stage_recompute("full") is None and stage_recompute("every:2") is None
    for bad in ("block:0", "block:", "uniform:x", "block:-1", "blocks:2"):
        with pytest.raises(InvalidInputError, match="block:N"):
            check_recompute(bad)
    # block:N adds less time than full, more with N; uniform:N has full's time and keeps less than full
    assert recompute_rank("selective") < recompute_rank("block:1") < recompute_rank("block:4") < recompute_rank("full")
    assert recompute_rank("uniform:1") == recompute_rank("full") < recompute_rank("uniform:2") < recompute_rank("uniform:8")


@pytest.mark.parametrize("sizes", [(12, 12), (13, 11), (4, 7, 7, 6), (3, 3, 2, 4, 4, 8)])
@pytest.mark.parametrize("count", [1, 2, 5])
def test_block_recomputes_the_first_n_decoders_of_each_stage(work, sizes, count):
    none_b, none_a = _per_layer(work, "none")
    full_b, full_a = _per_layer(work, "full")
    mode = f"block:{count}"
    costs = work.with_recompute(mode).stage_costs(2, mode, sizes)
    start = 0
    for s, size in enumerate(sizes):
        layers = range(start, start + size)
        decoders = [i for i in layers if 0 < i < 23][:count]  # layer 0 the embedding, 23 the head
        expected_b = sum(full_b[i] if i in decoders else none_b[i] for i in layers)
        expected_a = sum(full_a[i] if i in decoders else none_a[i] for i in layers)
        assert costs.backward[s] == pytest.approx(expected_b, rel=1e-12)
        assert costs.activation_bytes[s] == pytest.approx(expected_a, rel=1e-12)
        assert costs.forward[s] == pytest.approx(work.profile(2, "none").stage_costs(sizes).forward[s], rel=1e-12)
        start += size


@pytest.mark.parametrize("sizes", [(12, 12), (13, 11), (4, 7, 7, 6)])
@pytest.mark.parametrize("count", [1, 2, 3, 22])
def test_uniform_recomputes_every_decoder_and_keeps_one_input_per_group(work, sizes, count):
    none_b, none_a = _per_layer(work, "none")
    full_b, full_a = _per_layer(work, "full")
    mode = f"uniform:{count}"
    costs = work.with_recompute(mode).stage_costs(2, mode, sizes)
    start = 0
    for s, size in enumerate(sizes):
        layers = range(start, start + size)
        decoders = [i for i in layers if 0 < i < 23]
        kept = decoders[::count]  # the first of each group of `count`; the last group may be shorter
        edges = [i for i in layers if i not in decoders]
        assert costs.backward[s] == pytest.approx(sum(full_b[decoders]) + sum(none_b[edges]), rel=1e-12)
        assert costs.activation_bytes[s] == pytest.approx(sum(full_a[kept]) + sum(none_a[edges]), rel=1e-12)
        start += size


def test_enough_blocks_is_uniform_1_and_the_split_moves_what_block_costs(work):
    sizes = (6, 6, 6, 6)
    every = work.with_recompute("block:22").stage_costs(2, "block:22", sizes)
    single = work.with_recompute("uniform:1").stage_costs(2, "uniform:1", sizes)
    assert every.backward == pytest.approx(single.backward, rel=1e-12)
    assert every.activation_bytes == pytest.approx(single.activation_bytes, rel=1e-12)
    # Megatron-LM's uniform 1 is pipeplan's full: the embedding and the head are outside its TransformerBlock,
    # and outside full's checkpointing too (no engine checkpoints them)
    whole = work.with_recompute("full").stage_costs(2, "full", sizes)
    assert single.forward == pytest.approx(whole.forward, rel=1e-12)
    assert single.backward == pytest.approx(whole.backward, rel=1e-12)
    assert single.activation_bytes == pytest.approx(whole.activation_bytes, rel=1e-12)
    # block:2 on 4 stages recomputes 8 decoders, on 2 stages 4: more stages, more backward time in all
    four = sum(work.with_recompute("block:2").stage_costs(2, "block:2", sizes).backward)
    two = sum(work.with_recompute("block:2").stage_costs(2, "block:2", (12, 12)).backward)
    none = sum(work.profile(2, "none").stage_costs(sizes).backward)
    assert none < two < four


def test_the_partitioners_profile_is_a_lower_bound_over_splits(work):
    """What the partitioner and the memory bounds read: never more time nor bytes than any split's stages."""
    for mode in ("block:2", "uniform:3"):
        pinned = work.with_recompute(mode)
        profile = pinned.profile(2, mode)
        for sizes in ((24,), (12, 12), (4, 7, 7, 6), (2,) * 12):
            costs = pinned.stage_costs(2, mode, sizes)
            assert sum(profile.backward) <= sum(costs.backward) * (1 + 1e-12)
            assert sum(profile.activation_bytes) <= sum(costs.activation_bytes) * (1 + 1e-12)


def test_per_module_and_bad_stages_are_refused():
    with pytest.raises(InvalidInputError, match="method per pipeline stage"):
        layer_costs(SPEC, 1, recompute={"layers": "block:2"})
    with pytest.raises(InvalidInputError, match="add up to the model's 24 layers"):
        stage_layer_modes(SPEC, "block:2", (12, 11))
    assert stage_layer_modes(SPEC, "selective", (12, 12)) is None


def test_plan_pins_block_and_the_export_writes_it(run_cli):
    base = ["plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--tp", "1", "--pp", "2",
            "--schedules", "1f1b", "--dp-modes", "ddp", "--json", "--top", "1", "--export", "megatron"]
    steps = {}
    for mode in ("none", "block:2", "block:11", "full"):
        status, out, err = run_cli(*base, "--recompute", mode)
        assert status == 0, err
        plan = json.loads(out)["export"]["plan"]
        assert set(plan["recompute"]) == {mode}
        steps[mode] = plan["step_time"]
        line = next(iter(plan["exports"]["megatron"]["files"].values()))
        if mode.startswith("block"):
            assert f"--recompute-granularity full --recompute-method block --recompute-num-layers {mode[6:]}" in line
    assert steps["none"] < steps["block:2"] < steps["block:11"]
    status, out, err = run_cli(*base, "--recompute", "uniform:1")  # Megatron's uniform 1 is pipeplan's full
    assert status == 0, err
    assert set(json.loads(out)["export"]["plan"]["recompute"]) == {"full"}


@pytest.mark.parametrize("argv, words", [
    (["--engine", "torchtitan", "--recompute", "block:2"], "--recompute for torchtitan must be one of"),
    (["--engine", "deepspeed", "--recompute", "uniform:2"], "--recompute for deepspeed must be one of"),
    (["--recompute", "block:0"], "--recompute for megatron must be one of"),
    (["--recompute", "layers=block:2"], "method per pipeline stage"),
])
def test_engines_without_the_method_refuse_it_in_one_line(run_cli, argv, words):
    for verb in (["plan", "--gpus", "8", "--global-batch", "32"], ["model"]):
        status, _, err = run_cli(*verb, "--preset", "gpt-1.5b", *argv)
        assert status == 2, err
        assert words in err and len(err.strip().splitlines()) == 1, err


def test_simulate_and_model_price_the_stages_as_plan_does(run_cli):
    """simulate --preset prices each stage's own first N decoders; model prices the model as one stage."""
    spans = {}
    for mode in ("none", "block:2", "block:11"):
        status, out, err = run_cli("simulate", "--preset", "gpt-1.5b", "--recompute", mode, "--partition", "12,12",
                                   "--json")
        assert status == 0, err
        spans[mode] = json.loads(out)["makespan"]
    assert spans["none"] < spans["block:2"] < spans["block:11"]
    kept = {}
    for mode in ("none", "block:2", "uniform:1"):
        status, out, err = run_cli("model", "--preset", "gpt-1.5b", "--recompute", mode, "--json")
        assert status == 0, err
        kept[mode] = [layer["activation_bytes"] for layer in json.loads(out)["layers"]]
    # one stage: decoders 0 and 1 (layers 1, 2) keep their input only, the rest all they keep without recompute
    assert kept["block:2"][1:3] == kept["uniform:1"][1:3] and kept["block:2"][3:] == kept["none"][3:]
    assert kept["block:2"][1] < kept["none"][1]


def test_the_plan_table_names_the_method(run_cli):
    status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--pp", "2",
                               "--schedules", "1f1b", "--recompute", "block:2", "--top", "1")
    assert status == 0, err
    assert "│        b2 │" in out and "bN block:N" in out


@pytest.mark.parametrize("preset", ["pi0", "openvla-7b", "gr00t-n1"])
def test_full_is_uniform_1_and_every_1_on_a_vla(preset):
    """full recomputes transformer blocks only, as Megatron-LM's uniform 1 and torchtitan's every:1 do: a VLA's
    projectors, linear layers, embeddings and heads run none under all three (review: full recomputed them)."""
    from pipeplan import hardware, presets

    work = Workload.from_spec(presets.get(preset), hardware.device("h100-80g"))
    full = work.with_recompute("full").profile(2, "full")
    uniform = work.with_recompute("uniform:1").stage_costs(2, "uniform:1", (work.num_layers,))
    every = work.with_recompute("every:1").profile(2, "every:1")
    assert full.backward == pytest.approx(list(every.backward), rel=1e-12)
    assert full.activation_bytes == pytest.approx(list(every.activation_bytes), rel=1e-12)
    assert sum(full.backward) == pytest.approx(sum(uniform.backward), rel=1e-12)
    assert sum(full.activation_bytes) == pytest.approx(sum(uniform.activation_bytes), rel=1e-12)

"""DeepSpeed's ``contiguous_gradients`` and ZeRO-3's ``stage3_prefetch_bucket_size`` / ``stage3_max_live_parameters``:
priced in memory where given, read from ``ds_config.json``, written into it, pinned by ``check``.

Not given, they price what the step model priced before them (no bucket buffer, FSDP2's next-layer
prefetch); ``contiguous-gradients on`` adds ``reduce_bucket_size`` bf16 elements per rank at ZeRO 1–3
(two buffers with ``overlap_comm`` at ZeRO 1–2); the stage-3 sizes set what ZeRO-3 holds gathered
beside the layer running; bad values are one line.
"""

from __future__ import annotations

import json

import pytest

from pipeplan import engines
from pipeplan.engines.deepspeed import (BUCKET_BUFFER_BYTES, REDUCE_BUCKET_SIZE, STAGE3_MAX_LIVE_PARAMETERS,
                                        STAGE3_PREFETCH_BUCKET_SIZE, deepspeed_config, deepspeed_pricing)
from pipeplan.errors import InvalidInputError
from pipeplan.planner import Workload

from test_engine_deepspeed_knobs import H100, _plan, gpt

DEEPSPEED = engines.get("deepspeed")


def test_defaults_are_deepspeeds_own():
    deepspeed = pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    fields = DeepSpeedZeroConfig.model_fields
    assert fields["contiguous_gradients"].default is True
    assert fields["prefetch_bucket_size"].default == STAGE3_PREFETCH_BUCKET_SIZE
    assert fields["max_live_parameters"].default == STAGE3_MAX_LIVE_PARAMETERS
    assert fields["prefetch_bucket_size"].alias == "stage3_prefetch_bucket_size"
    assert deepspeed.__version__


def test_not_given_the_knobs_are_deepspeeds_defaults():
    """runtime/zero/config.py: contiguous_gradients = True, stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters
    1e9: priced as such unless the file or the flags say otherwise."""
    assert deepspeed_pricing({}).buffer_bytes == deepspeed_pricing({"contiguous-gradients": "on"}).buffer_bytes != {}
    given = {"stage3-prefetch-bucket-size": str(STAGE3_PREFETCH_BUCKET_SIZE),
             "stage3-max-live-parameters": str(STAGE3_MAX_LIVE_PARAMETERS)}
    assert deepspeed_pricing({}).gather_ahead == deepspeed_pricing(given).gather_ahead != {}
    assert deepspeed_pricing({"contiguous-gradients": "off"}).buffer_bytes == {}
    spec = gpt()
    for mode in ("zero2", "fsdp"):
        assert _plan(spec, mode, knobs={}).memory == _plan(spec, mode, knobs={"contiguous-gradients": "on"}).memory


@pytest.mark.parametrize("mode, overlap, buffers", [("zero1", "off", 1), ("zero2", "off", 1), ("zero2", "on", 2),
                                                    ("fsdp", "on", 1), ("fsdp", "off", 1)])
def test_contiguous_gradients_holds_the_bucket_buffers(mode, overlap, buffers):
    spec = gpt()
    knobs = {"overlap-comm": overlap}
    off = _plan(spec, mode, knobs={**knobs, "contiguous-gradients": "off"})
    on = _plan(spec, mode, knobs={**knobs, "contiguous-gradients": "on"})
    extra = buffers * REDUCE_BUCKET_SIZE * BUCKET_BUFFER_BYTES
    assert on.memory[0].parameters - off.memory[0].parameters == pytest.approx(extra, rel=1e-12)
    assert on.step_time == off.step_time  # a copy per gradient either way: no time priced


def test_the_buffer_follows_the_bucket_and_stage_0_has_none():
    spec = gpt()
    small = _plan(spec, "zero2", knobs={"contiguous-gradients": "on", "reduce-bucket-size": "1e6"})
    none = _plan(spec, "zero2", knobs={"contiguous-gradients": "off"})
    assert small.memory[0].parameters - none.memory[0].parameters == pytest.approx(1e6 * BUCKET_BUFFER_BYTES)
    assert _plan(spec, "ddp", knobs={"contiguous-gradients": "on"}).memory == \
        _plan(spec, "ddp", knobs={"contiguous-gradients": "off"}).memory


def test_stage3_sizes_set_what_is_gathered_beside_the_layer():
    spec = gpt()
    largest = max(Workload.from_spec(spec, H100).profile(1, "none").params)

    def gathered(**knobs: str) -> float:
        return _plan(spec, "fsdp", knobs={k.replace("_", "-"): v for k, v in knobs.items()}).memory[0].parameters

    none = gathered(stage3_prefetch_bucket_size="0")
    assert gathered(stage3_prefetch_bucket_size="1e6") - none == pytest.approx(2 * 1e6, rel=1e-9)
    # the live cap stops the prefetch: max live − the layer running
    capped = gathered(stage3_prefetch_bucket_size="1e9", stage3_max_live_parameters=str(int(largest + 3e5)))
    assert capped - none == pytest.approx(2 * 3e5, rel=1e-6)
    # a cap below the layer running leaves it gathered, nothing ahead
    assert gathered(stage3_max_live_parameters="1", stage3_prefetch_bucket_size="1e9") == pytest.approx(none)
    # with a pipeline ZeRO-3 is not run by DeepSpeed; other modes do not move
    assert _plan(spec, "zero2", knobs={"stage3-prefetch-bucket-size": "0"}).memory == _plan(spec, "zero2",
                                                                                            knobs={}).memory


# ------------------------------------------------------------------------------------ the file
def _export(tmp_path, mode, knobs):
    plan = _plan(gpt(), mode, knobs=knobs)
    for file in DEEPSPEED.export(plan, knobs=knobs):
        (tmp_path / file.name).write_text(file.text)
    return json.loads((tmp_path / "ds_config.json").read_text())


def test_export_writes_them_and_the_reader_reads_them_back(tmp_path):
    knobs = {"contiguous-gradients": "off", "stage3-prefetch-bucket-size": "1000000",
             "stage3-max-live-parameters": "30000000"}
    zero = _export(tmp_path, "fsdp", knobs)["zero_optimization"]
    assert zero["contiguous_gradients"] is False
    assert (zero["stage3_prefetch_bucket_size"], zero["stage3_max_live_parameters"]) == (1_000_000, 30_000_000)
    read = DEEPSPEED.read(tmp_path)
    assert read.value("contiguous_gradients") == "off"
    assert (read.value("stage3_prefetch_bucket_size"), read.value("stage3_max_live_parameters")) == (1e6, 3e7)
    assert not any("contiguous" in key or "stage3" in key for key in read.ignored)
    # the stage-3 sizes are ZeRO-3's only: left out of a ZeRO-2 config; nothing given, nothing written
    assert "stage3_prefetch_bucket_size" not in deepspeed_config(_plan(gpt(), "zero2", knobs={}), knobs)[
        "zero_optimization"]
    assert deepspeed_config(_plan(gpt(), "zero2", knobs={}))["zero_optimization"] == {"stage": 2}


@pytest.mark.parametrize("zero, words", [
    ({"contiguous_gradients": "sometimes"}, "zero_optimization.contiguous_gradients must be true or false, got "
                                            "\"sometimes\""),
    ({"stage3_prefetch_bucket_size": -1}, "zero_optimization.stage3_prefetch_bucket_size must be >= 0, got -1"),
    ({"stage3_max_live_parameters": "lots"}, "stage3_max_live_parameters must be a whole number of elements"),
    ({"max_live_parameters": 5, "stage3_max_live_parameters": 6}, "sets both stage3_max_live_parameters and "
                                                                 "max_live_parameters"),
])
def test_bad_values_are_one_line(tmp_path, zero, words):
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_batch_size": 32, "zero_optimization": {"stage": 3, **zero}}))
    with pytest.raises(InvalidInputError) as error:
        DEEPSPEED.read(path)
    assert words in str(error.value) and "\n" not in str(error.value)


@pytest.mark.parametrize("zero, refused", [
    ({"contiguous_gradients": "yes"}, False), ({"contiguous_gradients": "sometimes"}, True),
    ({"stage3_prefetch_bucket_size": 0}, False), ({"stage3_prefetch_bucket_size": -1}, True),
    ({"stage3_max_live_parameters": "lots"}, True), ({"max_live_parameters": 5, "stage3_max_live_parameters": 6}, True),
])
def test_verdicts_are_deepspeeds(tmp_path, zero, refused):
    pytest.importorskip("deepspeed")
    from deepspeed.runtime.zero.config import DeepSpeedZeroConfig

    try:
        DeepSpeedZeroConfig(**zero)
        theirs = False
    except Exception:  # noqa: BLE001 - pydantic's ValidationError: DeepSpeed refuses the value
        theirs = True
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_batch_size": 32, "zero_optimization": {"stage": 3, **zero}}))
    try:
        DEEPSPEED.read(path)
        ours = False
    except InvalidInputError:
        ours = True
    assert ours == theirs == refused


def test_yes_is_deepspeeds_true(tmp_path):
    # DeepSpeed's pydantic models take "yes" as true (pydantic's lax bool), as for overlap_comm: read, not refused
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps({"train_batch_size": 32, "zero_optimization": {"stage": 2,
                                                                             "contiguous_gradients": "yes"}}))
    assert DEEPSPEED.read(path).value("contiguous_gradients") == "on"


def test_check_prices_the_buffers(run_cli, tmp_path):
    config = {"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2,
              "bf16": {"enabled": True}, "zero_optimization": {"stage": 2, "contiguous_gradients": True}}
    path = tmp_path / "ds_config.json"
    argv = ("--preset", "gpt-1.5b", "--gpus", "8", "--top", "0", "--json")
    results = []
    for contiguous in (True, False):
        config["zero_optimization"]["contiguous_gradients"] = contiguous
        path.write_text(json.dumps(config))
        status, out, err = run_cli("check", "--deepspeed-config", str(path), *argv)
        assert status == 0, err
        results.append(json.loads(out))
    on, off = results
    assert on["config"]["pinned"]["contiguous_gradients"]["value"] == "on"
    assert "contiguous_gradients" in on["config"]["pinned"]["contiguous_gradients"]["source"]
    peak_on = max(rank["total"] for rank in on["predicted"]["plan"]["memory"])
    peak_off = max(rank["total"] for rank in off["predicted"]["plan"]["memory"])
    assert peak_on - peak_off == pytest.approx(REDUCE_BUCKET_SIZE * BUCKET_BUFFER_BYTES, rel=1e-9)


# ------------------------------------------------------------------------------------------- CLI
PLAN = ("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "1", "--tp", "1",
        "--micro-batch-size", "2", "--dp-modes", "zero2", "--top", "1")


@pytest.mark.parametrize("argv, words", [
    (("--engine", "deepspeed", "--contiguous-gradients", "maybe"),
     "--contiguous-gradients for deepspeed must be one of on, off, got 'maybe'"),
    (("--engine", "deepspeed", "--stage3-prefetch-bucket-size", "-5"),
     "--stage3-prefetch-bucket-size for deepspeed must be a number of elements, got '-5'"),
    (("--engine", "torch", "--contiguous-gradients", "on"), "torch has no knob --contiguous-gradients"),
])
def test_cli_refuses_in_one_line(run_cli, argv, words):
    status, out, err = run_cli(*PLAN, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err, err

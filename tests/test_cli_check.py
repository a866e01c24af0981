"""``pipeplan check``: one-line refusals, the text that fits 80 columns, the JSON names, the model's source.

The readers are the engines' (:meth:`pipeplan.engines.Engine.read`); the tests of the verb
itself read a JSON file of RunConfig fields through a stand-in reader, so what they check is
the verb's: flags, output, refusals.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeplan.engines import RunConfig, Setting, record
from pipeplan.models.spec import ModelSpec

RunCli = Callable[..., tuple[int, str, str]]
ROOT = Path(__file__).resolve().parent.parent
GPT = str(ROOT / "examples" / "gpt-6.2b.json")
FIELDS = {"tp": 2, "pp": 2, "micro_batch_size": 1, "global_batch": 64, "schedule": "1f1b", "dp_mode": "zero1",
          "recompute": "selective"}


@pytest.fixture
def fields_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Callable[..., str]:
    """A file of RunConfig fields, read by a stand-in reader for every engine (``model``: a spec path)."""

    def read(self: record.Engine, path: Path) -> RunConfig:
        data = json.loads(Path(path).read_text())
        model = data.pop("model", None)
        settings = {key: Setting(tuple(value) if isinstance(value, list) else value, f"{Path(path).name}: {key}")
                    for key, value in data.items()}
        return RunConfig(self.name, str(path), settings, model=None if model is None else ModelSpec.from_file(model),
                         model_source="" if model is None else f"the file's model {Path(model).name}",
                         ignored=("log-interval",), notes=("a reader's note",))

    monkeypatch.setattr(record.Engine, "read", read)

    def write(**fields: object) -> str:
        path = tmp_path / "config.json"
        path.write_text(json.dumps(fields))
        return str(path)

    return write


def _one_line(status: int, err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert status == 2 and len(lines) == 1, err
    return lines[0]


@pytest.mark.parametrize(("argv", "words"), [
    (["--gpus", "8"], "one of the arguments --megatron-args --deepspeed-config --torchtitan-config --torch-export"),
    (["--megatron-args", "a", "--deepspeed-config", "b"], "not allowed with argument"),
    (["--deepspeed-config", "x.json", "--measured-step", "fast"], "--measured-step must be a time with its unit"),
    (["--deepspeed-config", "x.json", "--measured-step", "2.98"], "--measured-step must be a time with its unit"),
    (["--deepspeed-config", "x.json", "--measured-step", "0s"], "--measured-step must be > 0"),
    (["--deepspeed-config", "x.json", "--gpus", "8,x"], "--gpus[1] must be an integer"),
    (["--deepspeed-config", "x.json", "--gpus", "0"], "--gpus must be >= 1"),
    (["--deepspeed-config", "x.json", "--top", "-1"], "--top must be >= 0"),
    (["--deepspeed-config", "x.json", "--json", "--out", "d"], "--out does not apply with --json"),
    (["--deepspeed-config", "no/such.json", "--preset", "pi0"], "no/such.json: no such file or directory"),
    (["--deepspeed-config", "x.json", "--cameras", "2"], "--cameras applies to --preset"),
    (["--deepspeed-config", "x.json", "--preset", "gpt-1.5b", "--cameras", "2"], "preset 'gpt-1.5b' has no --cameras"),
])
def test_bad_input_is_one_line(run_cli: RunCli, argv: list[str], words: str) -> None:
    line = _one_line(*run_cli("check", *argv)[::2])
    assert line.startswith("pipeplan") and words in line, line


@pytest.mark.parametrize(("fields", "argv", "words"), [
    (dict(FIELDS), ["--gpus", "8"], "describes no model: give --preset"),
    (dict(FIELDS, model=GPT), [], "does not give gpus: give --gpus N"),
    (dict(FIELDS, model=GPT), ["--gpus", "6"], "tp 2 × pp 2 = 4 does not divide 6 GPUs"),
    ({k: v for k, v in FIELDS.items() if k != "global_batch"} | {"model": GPT}, ["--gpus", "8"], "--global-batch"),
    (dict(FIELDS, model=GPT), ["--gpus", "8", "--global-batch", "32"], "--global-batch 32 disagrees"),
])
def test_a_configuration_that_cannot_be_checked_is_one_line(run_cli: RunCli, fields_file: Callable[..., str],
                                                            fields: dict[str, object], argv: list[str],
                                                            words: str) -> None:
    line = _one_line(*run_cli("check", "--deepspeed-config", fields_file(**fields), *argv)[::2])
    assert words in line, line


def test_text_fits_80_columns_and_names_every_part(run_cli: RunCli, fields_file: Callable[..., str],
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run_cli("check", "--megatron-args", fields_file(**FIELDS, model=GPT), "--gpus", "8,16",
                               "--measured-step", "2.98s", "--top", "1")
    assert status == 0, err
    assert max(len(line) for line in out.splitlines()) <= 80
    for words in ("configuration", "derived: 8 GPUs / (tp 2 × pp 2)", "predicted step", "tokens/s per GPU",
                  "where the step goes", "exposed data-parallel communication", "tensor-parallel collectives",
                  "memory per pipeline rank", "is not compute or communication", "best plans in megatron",
                  "best plans in any engine", "megatron_args.sh", "scaling (global batch held)",
                  "read, not priced: log-interval", "note: a reader's note"):
        assert words in out, words


def test_json_names_scripts_depend_on(run_cli: RunCli, fields_file: Callable[..., str]) -> None:
    status, out, err = run_cli("check", "--deepspeed-config", fields_file(**FIELDS), "--spec", GPT, "--gpus",
                               "8,16", "--measured-step", "850ms", "--top", "1", "--json")
    assert status == 0, err
    data = json.loads(out)
    for key in ("step_ms", "samples_per_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_bytes", "breakdown"):
        assert key in data["predicted"]
    assert data["measured"]["measured_ms"] == 850.0
    assert [row["gpus"] for row in data["scaling"]["rows"]] == [8, 16]
    assert data["config"]["engine"] == "deepspeed" and data["config"]["pinned"]["tp"]["value"] == 2
    assert data["model"] == {"name": "gpt-6.2b", "source": f"--spec {GPT}"}
    assert set(data["best"]) == {"same_engine", "any_engine"}


def test_a_model_flag_wins_over_the_files_with_a_note(run_cli: RunCli, fields_file: Callable[..., str]) -> None:
    status, out, err = run_cli("check", "--megatron-args", fields_file(**FIELDS, model=GPT), "--preset", "gpt-1.5b",
                               "--gpus", "8", "--top", "0", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["model"]["source"] == "--preset gpt-1.5b"
    assert any("is not used" in note and "gpt-6.2b" in note for note in data["notes"])


def test_out_writes_the_engines_files(run_cli: RunCli, fields_file: Callable[..., str], tmp_path: Path) -> None:
    out_dir = tmp_path / "best"
    status, _, err = run_cli("check", "--deepspeed-config", fields_file(**FIELDS, model=GPT), "--gpus", "8",
                             "--top", "1", "--out", str(out_dir))
    assert status == 0, err
    assert (out_dir / "ds_config.json").exists() and "wrote" in err


# ---------------------------------------------------------------- the round trip of issue 31, item 5
#: Each engine's check flag.
FLAG = {"megatron": "--megatron-args", "deepspeed": "--deepspeed-config", "torchtitan": "--torchtitan-config",
        "torch": "--torch-export"}
#: (engine, plan's pins): each engine's schedules, data-parallel modes, tp and pp, small enough for ~1 s a call.
ROUND_TRIPS = [
    ("megatron", ["--tp", "2", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "zero1", "--recompute", "selective"]),
    ("megatron", ["--tp", "1", "--pp", "2", "--schedules", "interleaved", "--dp-modes", "ddp", "--recompute", "none",
                  "--grad-sync", "megatron"]),
    ("megatron", ["--tp", "2", "--pp", "1", "--dp-modes", "ddp", "--recompute", "full", "--sequence-parallel", "off"]),
    ("megatron", ["--tp", "2", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "zero1", "--recompute", "none",
                  "--tp-comm-overlap", "on"]),
    # Megatron-LM's --recompute-method block / uniform with --recompute-num-layers N (priced per stage)
    ("megatron", ["--tp", "2", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "zero1", "--recompute", "block:3"]),
    ("megatron", ["--tp", "1", "--pp", "2", "--schedules", "interleaved", "--dp-modes", "ddp", "--recompute",
                  "uniform:2"]),
    ("deepspeed", ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "zero1", "--recompute", "none"]),
    ("deepspeed", ["--tp", "1", "--pp", "1", "--dp-modes", "fsdp", "--recompute", "full"]),
    # --reduce-bucket-size is written to ds_config.json and read back (the bucket of the overlap it prices)
    ("deepspeed", ["--tp", "1", "--pp", "1", "--dp-modes", "zero2", "--recompute", "none", "--overlap-comm", "on",
                   "--reduce-bucket-size", "100000000"]),
    # --grad-reduce-dtype is written as Megatron-LM's --grad-reduce-in-bf16 / --accumulate-allreduce-grads-in-fp32 and
    # DeepSpeed's communication_data_type, and read back (the reduction's bytes and the gradient buffer it prices)
    ("megatron", ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "zero1", "--recompute", "none",
                  "--grad-reduce-dtype", "bf16"]),
    ("megatron", ["--tp", "2", "--pp", "1", "--dp-modes", "ddp", "--recompute", "none", "--grad-reduce-dtype",
                  "fp32"]),
    ("deepspeed", ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "zero1", "--recompute", "none",
                   "--grad-reduce-dtype", "bf16"]),
    ("deepspeed", ["--tp", "1", "--pp", "1", "--dp-modes", "fsdp", "--recompute", "none", "--grad-reduce-dtype",
                   "bf16"]),
    ("torchtitan", ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "fsdp", "--recompute", "none"]),
    ("torchtitan", ["--tp", "2", "--pp", "2", "--schedules", "interleaved", "--dp-modes", "ddp", "--recompute",
                    "full"]),
    ("torchtitan", ["--tp", "1", "--pp", "4", "--schedules", "zb-v", "--dp-modes", "ddp", "--recompute", "none"]),
    # plain torch prices no --recompute (--engine torch refuses it): the planner searches it
    ("torch", ["--tp", "1", "--pp", "4", "--schedules", "zb-v", "--dp-modes", "ddp"]),
    ("torch", ["--tp", "1", "--pp", "2", "--schedules", "interleaved", "--dp-modes", "fsdp"]),
    # plain torch's DDP knobs are written as DDP_OPTIONS in split_spec.py and read back (the buckets and the walk)
    ("torch", ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "ddp", "--bucket-cap-mb", "5",
               "--find-unused-parameters", "on"]),
    # DeepSpeed's contiguous_gradients and ZeRO-3 sizes are written to ds_config.json and read back (their memory)
    ("deepspeed", ["--tp", "1", "--pp", "1", "--dp-modes", "fsdp", "--recompute", "none", "--contiguous-gradients",
                   "on", "--stage3-prefetch-bucket-size", "1000000", "--stage3-max-live-parameters", "200000000"]),
]
PLAN = ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32"]
#: What the round trip must give back: the plan's fields as plan --json writes them.
KEPT = ("tp", "pp", "dp", "dp_mode", "schedule", "virtual_stages", "micro_batch_size", "microbatches",
        "global_batch", "layers_per_stage", "recompute", "sequence_parallel")


def _reads(engine: str) -> bool:
    from pipeplan import engines

    return engines.get(engine).files.read is not record._no_reader


@pytest.mark.parametrize(("engine", "pins"), ROUND_TRIPS, ids=[f"{e}-{'-'.join(p[1::2])}" for e, p in ROUND_TRIPS])
def test_plan_export_then_check_gives_the_same_plan_and_step(run_cli: RunCli, tmp_path: Path, engine: str,
                                                             pins: list[str]) -> None:
    if not _reads(engine):
        pytest.skip(f"{engine}'s reader has not landed")
    out = tmp_path / engine
    # --engine: plan prices the engine as check does (DeepSpeed's hooks and gradient sync, torchtitan's and plain
    # torch's eager kernels)
    from pipeplan import engines

    priced = ["--engine", engine] if engines.get(engine).knobs.knobs else []
    status, text, err = run_cli("plan", *PLAN, *pins, *priced, "--export", engine, "--json", "--top", "1")
    assert status == 0, err
    planned = json.loads(text)["export"]["plan"]
    out.mkdir()
    for name, content in planned["exports"][engine]["files"].items():  # what --export ENGINE --out DIR writes
        (out / name).write_text(content)
    status, text, err = run_cli("check", FLAG[engine], str(out), "--preset", "gpt-1.5b", "--gpus", "8",
                                "--global-batch", "32", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(text)
    got, searched = checked["predicted"]["plan"], checked["config"]["searched"]
    given = [key for key in KEPT if key not in searched and not (key == "sequence_parallel" and "tp" in searched)]
    assert {key: got[key] for key in given} == {key: planned[key] for key in given}
    step = planned["step_time"] * 1e3 * planned["time_unit_seconds"]
    assert got.get("grad_reduce_dtype") == planned.get("grad_reduce_dtype") == _pinned(pins, "--grad-reduce-dtype")
    if searched:  # what the files do not carry was searched within what they do: never slower than plan's pick
        assert checked["predicted"]["step_ms"] <= step * (1 + 1e-12), searched
        return
    assert got.get("tp_comm_overlap") == planned.get("tp_comm_overlap")
    assert checked["predicted"]["step_ms"] == pytest.approx(step, rel=1e-12)


def _pinned(pins: list[str], flag: str) -> str | None:
    """The value ``pins`` gives ``flag`` (``None``: not given)."""
    return pins[pins.index(flag) + 1] if flag in pins else None


# ---------------------------------------------------------------- real files, read by the engines' readers
DATA = ROOT / "tests" / "data" / "check"


def test_a_users_ds_config(run_cli: RunCli) -> None:
    if not _reads("deepspeed"):
        pytest.skip("deepspeed's reader has not landed")
    status, out, err = run_cli("check", "--deepspeed-config", str(DATA / "ds_config.json"), "--preset", "gpt-1.5b",
                               "--gpus", "2", "--top", "1", "--json")
    assert status == 0, err
    data = json.loads(out)
    pinned = data["config"]["pinned"]
    assert pinned["dp_mode"] == {"value": "zero1", "source": "ds_config.json: zero_optimization.stage = 1"}
    assert pinned["global_batch"]["value"] == 4 and "train_batch_size" in pinned["global_batch"]["source"]
    assert pinned["micro_batch_size"]["value"] == 1
    assert {"tp", "pp"} <= set(data["config"]["searched"])  # a ds_config does not fix the pipeline
    assert "steps_per_print" in data["config"]["ignored"]
    assert data["best"]["same_engine"] and "ds_config.json" in data["best"]["same_engine"][0]["files"]


@pytest.mark.parametrize(("text", "words"), [
    ('{"train_batch_size": 4, "zero_optimization": {"stage": 2, "reduce_bucket_sise": 5}}', "reduce_bucket_sise"),
    ('{"train_batch_size": 4, "zero_optimization": {"stage": 7}}', "stage"),
    ("not json", "ds_config.json"),
])
def test_a_ds_config_deepspeed_refuses_is_one_line(run_cli: RunCli, tmp_path: Path, text: str, words: str) -> None:
    if not _reads("deepspeed"):
        pytest.skip("deepspeed's reader has not landed")
    path = tmp_path / "ds_config.json"
    path.write_text(text)
    line = _one_line(*run_cli("check", "--deepspeed-config", str(path), "--preset", "gpt-1.5b", "--gpus", "2")[::2])
    assert words in line, line


def test_a_megatron_line_with_its_own_model(run_cli: RunCli) -> None:
    if not _reads("megatron"):
        pytest.skip("megatron's reader has not landed")
    line = ROOT / "examples" / "check" / "train_gpt.sh"
    status, out, err = run_cli("check", "--megatron-args", str(line), "--top", "0", "--gpus", "16,32", "--json")
    assert status == 0, err
    data = json.loads(out)
    pinned = data["config"]["pinned"]
    assert pinned["gpus"]["value"] == 16 and "--nproc-per-node 8 --nnodes 2" in pinned["gpus"]["source"]
    assert (pinned["tp"]["value"], pinned["pp"]["value"], pinned["dp"]["value"]) == (2, 2, 4)
    assert pinned["num_microbatches"]["value"] == 256 // (2 * 4)
    assert data["config"]["searched"] == []  # a Megatron line fixes everything the step needs
    assert data["model"]["source"].startswith("--num-layers 24")
    assert "--log-interval 10" in data["config"]["ignored"]
    rows = data["scaling"]["rows"]
    assert [row["microbatches"] for row in rows] == [32, 16]  # Megatron-LM derives them from the global batch


def test_a_megatron_line_checked_on_other_gpus_derives_its_microbatches_again(run_cli: RunCli) -> None:
    if not _reads("megatron"):
        pytest.skip("megatron's reader has not landed")
    line = ROOT / "examples" / "check" / "train_gpt.sh"
    status, out, err = run_cli("check", "--megatron-args", str(line), "--top", "0", "--gpus", "8", "--json")
    assert status == 0, err
    data = json.loads(out)
    assert data["predicted"]["plan"]["microbatches"] == 256 // (2 * 2)
    assert any("derived again" in note for note in data["notes"])


def test_a_flag_megatron_lacks_is_one_line(run_cli: RunCli, tmp_path: Path) -> None:
    if not _reads("megatron"):
        pytest.skip("megatron's reader has not landed")
    line = tmp_path / "train.sh"
    line.write_text("torchrun --nproc-per-node 8 pretrain_gpt.py --num-layers 24 --tensor-model-paralel-size 2\n")
    words = _one_line(*run_cli("check", "--megatron-args", str(line), "--preset", "gpt-1.5b")[::2])
    assert "--tensor-model-paralel-size" in words, words


def test_torchtitans_toml_release_round_trip(run_cli: RunCli, tmp_path: Path) -> None:
    """``plan --export torchtitan-toml --out DIR`` (torchtitan's TOML release) read back by check."""
    if not _reads("torchtitan"):
        pytest.skip("torchtitan's reader has not landed")
    pins = ["--engine", "torchtitan", "--tp", "2", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "fsdp",
            "--recompute", "full"]
    status, text, err = run_cli("plan", *PLAN, *pins, "--export", "torchtitan-toml", "--json", "--top", "1")
    assert status == 0, err
    planned = json.loads(text)["export"]["plan"]
    status, _, err = run_cli("plan", *PLAN, *pins, "--export", "torchtitan-toml", "--out", str(tmp_path / "t"),
                             "--top", "1")
    assert status == 0, err
    status, text, err = run_cli("check", "--torchtitan-config", str(tmp_path / "t"), "--preset", "gpt-1.5b",
                                "--gpus", "8", "--global-batch", "32", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(text)
    assert {key: checked["predicted"]["plan"][key] for key in KEPT} == {key: planned[key] for key in KEPT}
    step = planned["step_time"] * 1e3 * planned["time_unit_seconds"]
    assert checked["predicted"]["step_ms"] == pytest.approx(step, rel=1e-12)


def test_a_users_torchtitan_toml_with_its_own_model(run_cli: RunCli) -> None:
    if not _reads("torchtitan"):
        pytest.skip("torchtitan's reader has not landed")
    status, out, err = run_cli("check", "--torchtitan-config", str(ROOT / "examples" / "check" / "llama3_8b.toml"),
                               "--top", "0", "--json")
    assert status == 0, err
    data = json.loads(out)
    pinned = data["config"]["pinned"]
    assert (pinned["gpus"]["value"], pinned["dp_mode"]["value"], pinned["recompute"]["value"]) == (8, "fsdp", "full")
    assert "activation_checkpoint" in pinned["recompute"]["source"]
    assert data["model"]["name"] == "llama3-8B" and data["config"]["searched"] == []
    assert data["predicted"]["tokens_per_s_per_gpu"] > 0


def test_a_torch_export_needs_a_model(run_cli: RunCli, tmp_path: Path) -> None:
    if not _reads("torch"):
        pytest.skip("torch's reader has not landed")
    status, _, err = run_cli("plan", *PLAN, "--pp", "2", "--export", "torch", "--out", str(tmp_path / "t"), "--top", "1")
    assert status == 0, err
    line = _one_line(*run_cli("check", "--torch-export", str(tmp_path / "t"), "--gpus", "8")[::2])
    assert "give --preset" in line, line


def test_the_grad_sync_row_leaves_out_the_bucket_tag(run_cli, tmp_path):
    config = tmp_path / "ds_config.json"
    config.write_text(json.dumps({"train_batch_size": 32, "train_micro_batch_size_per_gpu": 2,
                                  "gradient_accumulation_steps": 2, "bf16": {"enabled": True},
                                  "zero_optimization": {"stage": 1, "overlap_comm": True,
                                                        "reduce_bucket_size": 1000000}}))
    status, out, err = run_cli("check", "--deepspeed-config", str(config), "--preset", "gpt-1.5b", "--gpus", "8",
                               "--gpu", "a100-80g", "--top", "0")
    assert status == 0, err
    sync = next(line for line in out.splitlines() if "grad sync" in line)
    assert "deepspeed-overlap " in sync and "bucket=" not in sync
    assert "1000000" in next(line for line in out.splitlines() if "reduce bucket size" in line)


def test_a_torch_export_of_an_adaptive_plan_checks(run_cli: RunCli, tmp_path: Path) -> None:
    """adaptive's order is no fixed schedule's ('csv' to the reader): check searches the schedule over the files'
    layout and finds the plan's own step, where it stopped with 'schedule must be one of ...' (review)."""
    pins = ["--engine", "torch", "--tp", "1", "--pp", "2", "--schedules", "adaptive", "--dp-modes", "ddp"]
    status, text, err = run_cli("plan", *PLAN, *pins, "--export", "torch", "--json", "--top", "1")
    assert status == 0, err
    planned = json.loads(text)["export"]["plan"]
    status, _, err = run_cli("plan", *PLAN, *pins, "--export", "torch", "--out", str(tmp_path / "t"), "--top", "1")
    assert status == 0, err
    status, text, err = run_cli("check", "--torch-export", str(tmp_path / "t"), "--preset", "gpt-1.5b", "--gpus", "8",
                                "--global-batch", "32", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(text)
    assert checked["predicted"]["plan"]["schedule"] == "adaptive"
    assert checked["predicted"]["step_ms"] == pytest.approx(planned["step_time"] * 1e3 * planned["time_unit_seconds"],
                                                            rel=1e-9)

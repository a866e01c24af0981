"""The torch engines' memory as their sources make it: DTensor's gathered inputs in a recomputed layer, a compiled loss.

pipeplan/planner/memory.py prices both from torchtitan's code (``apply_tp``'s ``ColwiseParallel``,
``build_cross_entropy_loss``); benchmarks/torchtitan_activations.py measures them on CPU, and the last
test here runs that measurement on a small block against pipeplan's bytes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from _torchtitan_toml import toml_release
from pipeplan import hardware
from pipeplan.engines.torchtitan import torchtitan_toml
from pipeplan.engines.torchtitan_config import llama3_spec, read_torchtitan_config
from pipeplan.models.layer_costs import gathered_input_bytes
from pipeplan.planner import Workload
from pipeplan.planner.memory import COMPILED_LOSS_COPIES, LOSS_LOGIT_COPIES, MemoryModel

ROOT = Path(__file__).resolve().parents[1]


def _work(seq: int = 2048, tp: int = 1, sequence_parallel: bool = True) -> Workload:
    spec = llama3_spec("debugmodel", seq)
    return Workload.from_spec(spec, hardware.device("h100-80g"), sequence_parallel=sequence_parallel,
                              tp_link=hardware.link("nvlink-h100")).with_tensor_parallel(tp)


def _recompute(work: Workload, engine: str | None, micro: int = 2, mode: str = "full") -> np.ndarray:
    work = work.with_recompute(mode)
    return MemoryModel(work, "adam", None, "fsdp", engine=engine).transient_bytes(micro, mode)[1]


@pytest.mark.parametrize("tp", [2, 4, 8])
def test_a_torch_engines_recomputed_block_holds_its_gathered_inputs_whole(tp: int) -> None:
    work = _work(tp=tp)
    extra = _recompute(work, "torchtitan") - _recompute(work, None)
    whole = np.asarray(gathered_input_bytes(work.spec, 2))
    blocks = whole > 0
    assert blocks.sum() == 6  # debugmodel's six blocks; the embedding and the head hold none
    # two bf16 inputs of width h over the whole sequence (2 x b x s x h x 2 bytes), less the 1/t shard stored
    assert whole[blocks] == pytest.approx(2 * 2 * 2048 * 256 * 2)
    # rerun: the gathered inputs whole; every block's backward: their whole-sequence gradients, as much again
    assert extra == pytest.approx(2 * whole * (1 - 1 / tp))
    assert np.array_equal(_recompute(work, "torch"), _recompute(work, "torchtitan"))
    # the workload that stores a none block's gathered inputs counts them once in the rerun, not twice
    saved = work.with_saved_gathered_inputs()
    assert _recompute(saved, "torchtitan") == pytest.approx(_recompute(work, "torchtitan"))


def test_the_gathered_inputs_scale_with_the_sequence_and_micro_batch() -> None:
    short, long = _work(seq=1024, tp=4), _work(seq=4096, tp=4)
    base = _recompute(short, "torchtitan") - _recompute(short, None)
    assert _recompute(long, "torchtitan") - _recompute(long, None) == pytest.approx(4 * base)
    assert (_recompute(short, "torchtitan", micro=3) - _recompute(short, None, micro=3)) == pytest.approx(1.5 * base)


@pytest.mark.parametrize("engine", [None, "megatron", "deepspeed"])
def test_megatrons_sequence_parallelism_keeps_the_shard(engine: str | None) -> None:
    work = _work(tp=4)
    assert not MemoryModel(work, "adam", None, "fsdp", engine=engine).gathered_bytes(2).any()


def test_no_gathered_inputs_at_tp_1_or_without_sequence_parallelism() -> None:
    for work in (_work(tp=1), _work(tp=4, sequence_parallel=False)):
        assert not MemoryModel(work, "adam", None, "fsdp", engine="torchtitan").gathered_bytes(2).any()


def test_a_layer_that_is_not_recomputed_holds_the_gradients_only() -> None:
    """Under none nothing reruns: the block's backward holds its gathered inputs' whole-sequence gradients alone
    (their inputs are stored, Workload.with_saved_gathered_inputs); Megatron-LM's engine none of it."""
    work = _work(tp=4)
    whole = np.asarray(gathered_input_bytes(work.spec, 2))
    assert _recompute(work, "torchtitan", mode="none") == pytest.approx(whole * (1 - 1 / 4))
    assert not _recompute(work, None, mode="none").any()


def _loss(engine: str | None, mode: str, compiled: bool) -> float:
    work = _work().with_recompute(mode)
    loss, _ = MemoryModel(work, "adam", None, "fsdp", engine=engine, compiled_loss=compiled).transient_bytes(2, mode)
    return float(loss.sum())


@pytest.mark.parametrize("mode", ["none", "op", "full"])
def test_a_compiled_loss_adds_nothing_to_the_logits_the_profile_stores(mode: str) -> None:
    """The head stores 1 L under every mode; the compiled loss's 0.5 L fits in it, eager PyTorch's 3 L do not."""
    logits = 4.0 * 2 * 2048 * 2048  # fp32 bytes of the debugmodel's logits at micro-batch 2 (vocabulary 2048)
    assert _loss("torchtitan", mode, compiled=True) == 0.0
    assert _loss("torch", mode, compiled=True) == 0.0
    assert _loss("torchtitan", mode, compiled=False) == pytest.approx((LOSS_LOGIT_COPIES["torchtitan"] - 1) * logits)
    assert COMPILED_LOSS_COPIES < 1


@pytest.mark.parametrize("engine", [None, "megatron", "deepspeed"])
def test_compiled_loss_is_a_torch_engines_only(engine: str | None) -> None:
    assert _loss(engine, "full", compiled=True) == _loss(engine, "full", compiled=False)


def _toml(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_the_reader_says_model_when_the_loss_is_not_among_the_compiled_components(tmp_path: Path) -> None:
    model = read_torchtitan_config(_toml(tmp_path, '[compile]\nenable = true\ncomponents = ["model"]\n'))
    both = read_torchtitan_config(_toml(tmp_path, '[compile]\nenable = true\ncomponents = ["model", "loss"]\n'))
    default = read_torchtitan_config(_toml(tmp_path, "[compile]\nenable = true\n"))
    off = read_torchtitan_config(_toml(tmp_path, '[compile]\nenable = false\ncomponents = ["model"]\n'))
    assert [c.settings["compile"].value for c in (model, both, default, off)] == ["model", "on", "on", "off"]


def test_the_toml_export_of_compile_model_names_its_components() -> None:
    assert 'components = ["model"]' in torchtitan_toml([2, 2], compile="model")
    assert "components" not in torchtitan_toml([2, 2], compile=True)  # the TOML keeps its default


def test_the_cpu_measurement_of_torchtitans_block_agrees_with_pipeplan() -> None:
    """torchtitan 0.2.2's own block, apply_tp and apply_ac on CPU (benchmarks/torchtitan_activations.py --small).

    ``op`` and ``full`` keep exactly what pipeplan stores (the block input, the saved matmul and flash
    outputs: no rounding anywhere, so 0.1%); at ``tp = 2`` under ``none`` the tensors of the whole
    sequence the block keeps are its two gathered inputs, pipeplan's ``gathered_input_bytes``.
    """
    pytest.importorskip("torch")
    pytest.importorskip("tyro", reason="torchtitan's dependencies are not installed (pip install .[engines])")
    tree = toml_release()
    out = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "torchtitan_activations.py"), "--small", "--json",
                          "--tp", "1,2"], capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(ROOT / "src")])})
    assert out.returncode == 0, out.stdout + out.stderr
    rows = {(r["tp"], r["mode"]): r for r in json.loads(out.stdout.strip().splitlines()[-1])}
    for key in ((1, "op"), (1, "full"), (2, "full")):
        assert rows[key]["pipeplan"] == pytest.approx(rows[key]["kept"], rel=1e-3), key
    none = rows[(2, "none")]
    assert none["full_sequence"] == pytest.approx(none["gathered_extra"] / (1 - 1 / 2))
    assert rows[(2, "full")]["full_sequence"] == 0


def test_plan_prices_the_compiled_loss_under_compile_on_only(run_cli) -> None:
    """``plan --engine torchtitan --compile on`` holds less at the peak than ``model`` (the loss eager) and ``off``;
    ``model`` compiles the kernels as ``on`` does (the same step time)."""
    def planned(compile: str) -> tuple[float, float]:
        status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu",
                                   "a100-80g", "--tp", "2", "--pp", "1", "--dp-modes", "fsdp", "--micro-batch-size",
                                   "4", "--recompute", "full", "--engine", "torchtitan", "--compile", compile,
                                   "--top", "1", "--json")
        assert status == 0, err
        plan = json.loads(out)["plans"][0]
        return plan["memory"][0]["total"], plan["step_time"]

    off, model, on = planned("off"), planned("model"), planned("on")
    assert on[0] < model[0] == off[0]
    assert on[1] == model[1] < off[1]


def test_components_without_the_model_price_eager_blocks_and_refuse_async_tp(tmp_path: Path) -> None:
    """torchtitan compiles what compile.components lists: the loss alone leaves the blocks eager (review), and its
    async TP needs the model compiled ("Async TP requires 'model' in --compile.components")."""
    from pipeplan.errors import InvalidInputError

    loss_only = read_torchtitan_config(_toml(tmp_path, '[compile]\nenable = true\ncomponents = ["loss"]\n'))
    assert loss_only.settings["compile"].value == "off" and any("compiles no model" in n for n in loss_only.notes)
    with pytest.raises(InvalidInputError, match="async TP needs compile.enable"):
        read_torchtitan_config(_toml(tmp_path, '[parallelism]\ntensor_parallel_degree = 2\n'
                                               'enable_async_tensor_parallel = true\n'
                                               '[compile]\nenable = true\ncomponents = ["loss"]\n'))


@pytest.mark.parametrize("compile", ["on", "model"])
@pytest.mark.parametrize("target, name", [("torchtitan", "torchtitan_config.py"), ("torchtitan-toml", "torchtitan.toml")])
def test_check_of_the_export_gives_plans_memory_and_compile(run_cli, tmp_path: Path, compile: str, target: str,
                                                              name: str) -> None:
    """plan --export, then check of what was written: the same compile value, step and memory per rank (review:
    check priced the eager loss, and the Python export read `model` back as `on`)."""
    args = ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu", "a100-80g", "--tp", "2", "--pp",
            "1", "--dp-modes", "fsdp", "--micro-batch-size", "4", "--recompute", "full", "--engine", "torchtitan",
            "--compile", compile, "--top", "1"]
    status, out, err = run_cli("plan", *args, "--json")
    assert status == 0, err
    planned = json.loads(out)["plans"][0]
    status, _, err = run_cli("plan", *args, "--export", target, "--out", str(tmp_path / "out"))
    assert status == 0, err
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "out" / name), "--preset", "gpt-1.5b",
                               "--gpu", "a100-80g", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(out)
    assert checked["config"]["pinned"]["compile"]["value"] == compile
    assert checked["predicted"]["peak_memory_bytes"] == pytest.approx([m["total"] for m in planned["memory"]])
    assert checked["predicted"]["step_ms"] == pytest.approx(planned["step_time"] * 1e3 * planned["time_unit_seconds"])


def test_plain_torchs_loss_is_its_own_code_not_compiled(run_cli) -> None:
    """--engine torch --compile on wraps the model in torch.compile; the loss is the user's (review)."""
    def total(compile: str) -> float:
        status, out, err = run_cli("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu",
                                   "a100-80g", "--tp", "1", "--pp", "2", "--dp-modes", "ddp", "--micro-batch-size",
                                   "4", "--engine", "torch", "--compile", compile, "--top", "1", "--json")
        assert status == 0, err
        return max(m["total"] for m in json.loads(out)["plans"][0]["memory"])

    assert total("on") == total("model")


def test_a_none_block_stores_its_gathered_inputs_under_the_torch_engines() -> None:
    """DTensor keeps the gathered whole-sequence inputs of a block that is not recomputed, for every microbatch in
    flight (review: only the recomputed block's transient had them; none was under-priced by up to 73 % at tp 8)."""

    spec = llama3_spec("8B", 2048)
    base = Workload.from_spec(spec, hardware.device("h100-80g")).with_tensor_parallel(8)
    saved = base.with_saved_gathered_inputs()
    whole = np.asarray(gathered_input_bytes(spec, 1))
    for mode, kept in (("none", whole), ("full", np.zeros_like(whole)), ("op", np.zeros_like(whole))):
        plain = np.asarray(base.with_recompute(mode).profile(1, mode).activation_bytes)
        more = np.asarray(saved.with_recompute(mode).profile(1, mode).activation_bytes)
        assert more - plain == pytest.approx(kept * (1 - 1 / 8), abs=1.0), mode
    # every:2 stores them on the blocks it does not recompute only
    assert np.count_nonzero(gathered_input_bytes(spec, 1, "every:2")) == spec.modules[1].num_layers // 2
    # tp 1, without sequence parallelism: nothing gathered
    assert saved.with_tensor_parallel(1).profile(1, "none").activation_bytes == \
        base.with_tensor_parallel(1).profile(1, "none").activation_bytes
    unsplit = saved.with_tensor_knobs(sequence_parallel=False)
    assert unsplit.saves_gathered_inputs
    assert unsplit.profile(1, "none").activation_bytes == \
        base.with_tensor_knobs(sequence_parallel=False).profile(1, "none").activation_bytes


def test_plan_and_check_store_the_gathered_inputs_alike(run_cli, tmp_path: Path) -> None:
    args = ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32", "--gpu", "a100-80g", "--tp", "2", "--pp",
            "1", "--dp-modes", "fsdp", "--micro-batch-size", "4", "--recompute", "none", "--top", "1"]
    totals = {}
    for engine in ("torchtitan", None):  # without --engine: Megatron-LM's sequence parallelism, the shards kept
        status, out, err = run_cli("plan", *args, *(("--engine", engine) if engine else ()), "--json")
        assert status == 0, err
        totals[engine] = json.loads(out)["plans"][0]["memory"][0]["total"]
    assert totals["torchtitan"] > totals[None]  # its gathered inputs and its eager loss's copies
    status, _, err = run_cli("plan", *args, "--engine", "torchtitan", "--export", "torchtitan-toml", "--out",
                             str(tmp_path / "out"))
    assert status == 0, err
    status, out, err = run_cli("check", "--torchtitan-config", str(tmp_path / "out" / "torchtitan.toml"), "--preset",
                               "gpt-1.5b", "--gpu", "a100-80g", "--top", "0", "--json")
    assert status == 0, err
    assert json.loads(out)["predicted"]["peak_memory_bytes"] == pytest.approx([totals["torchtitan"]])


def test_selective_keeps_the_gathered_inputs_as_none_does() -> None:
    """selective reruns the attention core only: its GEMMs' gathered inputs are stored as under none (review: plain
    torch, which searches selective, saw it as free memory)."""
    spec = llama3_spec("8B", 2048)
    saved = Workload.from_spec(spec, hardware.device("h100-80g")).with_tensor_parallel(8).with_saved_gathered_inputs()
    none = sum(saved.profile(2, "none").activation_bytes)
    selective = sum(saved.profile(2, "selective").activation_bytes)
    assert selective == pytest.approx(none, rel=0.02)  # flash attention: selective stores what none stores


def test_a_per_module_pin_keeps_its_rerun_transient() -> None:
    """The memory model reruns a layer from its none profile: a workload pinned per module answers none as none
    (review: it answered its pins, so layers=full held no rerun transient)."""
    work = _work(tp=2)
    modules = {module.name: "full" for module in work.spec.modules}
    whole = MemoryModel(work.with_recompute("full"), "adam", None, engine="megatron").transient_bytes(2, "full")[1]
    pinned = MemoryModel(work.with_recompute(modules), "adam", None, engine="megatron").transient_bytes(2, "full")[1]
    assert whole.any() and pinned == pytest.approx(whole)

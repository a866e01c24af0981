"""The torch export runs through its own file: ``split_spec.py``'s ``build_stages`` and ``build_schedule``.

Each test writes the torch export (``split_spec.py``, ``schedule.csv``) of a plan, imports
``split_spec.py`` in 2 gloo processes (:func:`pipeplan.runtime.spawn`), builds that rank's
``PipelineStage`` objects with the file's ``build_stages`` from a model whose modules sit at the
exported paths (``decoder.layers.{i}``), runs one step of the file's ``build_schedule``
(torch's ``_PipelineScheduleRuntime`` + ``_load_csv``) and compares every parameter's
gradient with one process running the same microbatches. zb-v puts stages 1 and 2 on
rank 1 — where the tracer's ``pipeline(split_spec)`` fails torch's P2P warm-up.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pipeplan import build_schedule, presets
from pipeplan.engines import LayerName, export_files, layer_names_in_reference
from pipeplan.plan import Plan

torch = pytest.importorskip("torch")

_WIDTH, _BATCH, _MICROBATCHES = 6, 8, 4


def _model(num_layers: int):
    """``decoder.layers.{i}``: Linear + Tanh blocks under a nested path, as the export names them."""
    torch.manual_seed(0)
    model = torch.nn.Module()
    model.decoder = torch.nn.Module()
    model.decoder.layers = torch.nn.ModuleList(
        torch.nn.Sequential(torch.nn.Linear(_WIDTH, _WIDTH), torch.nn.Tanh()) for _ in range(num_layers))
    return model


def _data():
    generator = torch.Generator().manual_seed(1)
    return torch.randn(_BATCH, _WIDTH, generator=generator), torch.randn(_BATCH, _WIDTH, generator=generator)


def _loss(output, target):
    return torch.nn.functional.mse_loss(output, target, reduction="sum")


def _rank(rank: int, world_size: int, folder: str, num_layers: int) -> dict[str, list]:
    """One rank: the file's own stages and schedule, one step; the gradients it produced."""
    loaded = importlib.util.spec_from_file_location(f"split_spec_{rank}", Path(folder) / "split_spec.py")
    assert loaded is not None and loaded.loader is not None
    split_spec = importlib.util.module_from_spec(loaded)
    loaded.loader.exec_module(split_spec)
    model = _model(num_layers)
    stages = split_spec.build_stages(model, rank, torch.device("cpu"))
    schedule = split_spec.build_schedule(stages, _MICROBATCHES, _loss, scale_grads=False)
    inputs, target = _data()
    placement = split_spec.STAGE_TO_RANK
    schedule.step(inputs if placement[0] == rank else None, target=target if placement[-1] == rank else None)
    return {name: p.grad.tolist() for name, p in model.named_parameters() if p.grad is not None}


def _reference(num_layers: int) -> dict[str, torch.Tensor]:
    model = _model(num_layers)
    inputs, target = _data()
    for x, y in zip(inputs.chunk(_MICROBATCHES), target.chunk(_MICROBATCHES)):
        y_hat = x
        for layer in model.decoder.layers:
            y_hat = layer(y_hat)
        _loss(y_hat, y).backward()
    return {name: p.grad for name, p in model.named_parameters()}


def _plan(name: str, virtual: int) -> tuple[Plan, object]:
    num_stages = 2 * virtual
    schedule = build_schedule(name, num_stages=num_stages, num_microbatches=_MICROBATCHES,
                              **({"virtual_stages": virtual} if name == "interleaved" else {}))
    plan = Plan(pp=2, dp=1, layers_per_stage=(2,) * num_stages, placement=schedule.placement, schedule=name,
                num_microbatches=_MICROBATCHES)
    return plan, schedule


def _names(num_layers: int) -> list[LayerName]:
    return [LayerName((f"decoder.layers.{i}",), "decoder") for i in range(num_layers)]


@pytest.mark.slow
@pytest.mark.parametrize("name,virtual", [("zb-v", 2), ("1f1b", 1), ("interleaved", 2)])
def test_the_files_own_stages_and_schedule_give_one_process_gradients(name, virtual, tmp_path):
    from pipeplan.runtime import spawn

    plan, schedule = _plan(name, virtual)
    for file in export_files(plan, "torch", _names(plan.num_layers), schedule=schedule):
        (tmp_path / file.name).write_text(file.text)
    got: dict[str, list] = {}
    for grads in spawn(_rank, 2, str(tmp_path), plan.num_layers, timeout=60.0):
        assert not set(grads) & set(got), "a parameter on two ranks"
        got.update(grads)
    expected = _reference(plan.num_layers)
    assert set(got) == set(expected)
    assert max(float((torch.tensor(got[k]) - expected[k]).abs().max()) for k in expected) < 1e-5


def test_a_rank_with_two_adjacent_stages_gets_no_tracer_split():
    """zb-v's V (rank 1 holds stages 1 and 2): no split_spec the tracer would fail on; 1F1B keeps it."""
    plans = {name: _plan(name, virtual)[0] for name, virtual in (("zb-v", 2), ("1f1b", 1))}
    texts = {name: {f.name: f.text for f in export_files(plan, "torch", _names(plan.num_layers))}
             for name, plan in plans.items()}
    assert "split_spec = None" in texts["zb-v"]["split_spec.py"]
    assert "rank 1 holds stages 1 and 2" in texts["zb-v"]["split_spec.py"]
    assert "'decoder.layers.2': SplitPoint.BEGINNING" in texts["1f1b"]["split_spec.py"]
    for files in texts.values():
        assert "def build_stages(" in files["split_spec.py"]
        compile(files["split_spec.py"], "split_spec.py", "exec")


def test_invented_paths_are_said_in_the_file_and_real_ones_are_not():
    invented = layer_names_in_reference(presets.get("dumbbell"))  # no module records its paths
    plan = Plan(pp=2, dp=1, layers_per_stage=(len(invented) // 2, len(invented) - len(invented) // 2),
                placement=(0, 1), schedule="1f1b", num_microbatches=4)
    text = {f.name: f.text for f in export_files(plan, "torch", invented)}["split_spec.py"]
    assert "NOTE: the module paths of vision, " in text and '"fqn"' in text and '"vision.0"' in text
    real = layer_names_in_reference(presets.get("gpt-1.5b"))
    plan = Plan(pp=2, dp=1, layers_per_stage=(12, len(real) - 12), placement=(0, 1), schedule="1f1b",
                num_microbatches=4)
    assert "NOTE:" not in {f.name: f.text for f in export_files(plan, "torch", real)}["split_spec.py"]

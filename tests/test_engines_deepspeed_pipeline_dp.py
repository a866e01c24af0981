"""ZeRO-1 with a pipeline and data parallelism (pp 2 × dp 2) run through DeepSpeed's own pipeline engine (issue 32).

The DeepSpeed export of a plan with ``pp = 2``, ``dp = 2`` and ``zero1`` (``ds_config.json`` +
``pipeline_module.py``) is loaded as written on 4 gloo processes (:func:`pipeplan.runtime.spawn`,
bounded: a rank that hangs fails the test, and no process is left after it): DeepSpeed's
``PipeDataParallelTopology`` puts ranks 0, 1 on stage 0 and 2, 3 on stage 1, each stage
replica reads its data-parallel share of the batch, ``deepspeed.initialize`` builds its ZeRO-1
optimizer and ``train_batch`` runs DeepSpeed's 1F1B-like pipeline schedule. DeepSpeed must
report the plan's ZeRO stage, micro batch, accumulation and global batch; the gradients it
holds before its first optimizer step must be one process's over the same global batch (to
bf16's resolution, as ``tests/test_engines_deepspeed.py``); and the loss must fall over a few
steps on that batch. Skips saying why without DeepSpeed; ``PIPEPLAN_REQUIRE_ENGINES=1`` makes
that skip a failure (CI, where the engines extra is installed).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from pipeplan.engines import export_files
from pipeplan.engines.deepspeed import deepspeed_parts, zero_stage
from pipeplan.plan import Plan

import _deepspeed_worker as worker
from _processes import live_children

#: bf16 keeps 8 significant bits: a gradient may differ from one process's by this share of the largest one
_BF16 = 2.0 ** -6
#: optimizer steps after the first, on the same batch, over which the loss must fall
_STEPS = 4
PLAN = Plan(pp=2, dp=2, layers_per_stage=(1, 3), placement=(0, 1), micro_batch_size=2, num_microbatches=4,
            dp_mode="zero1")


@pytest.fixture(scope="module")
def deepspeed() -> Any:
    """DeepSpeed on its CPU accelerator, imported once here so the forked ranks share the import."""
    os.environ["DS_ACCELERATOR"] = "cpu"
    try:
        import deepspeed as module
    except ImportError:
        if os.environ.get("PIPEPLAN_REQUIRE_ENGINES") == "1":
            pytest.fail("PIPEPLAN_REQUIRE_ENGINES=1 and DeepSpeed is not installed (pip install -e .[engines])")
        pytest.skip("DeepSpeed is not installed (pip install -e .[engines])")
    import deepspeed.pipe  # noqa: F401
    import deepspeed.runtime.pipe.engine  # noqa: F401
    import deepspeed.runtime.zero.muon.muon_optimizer  # noqa: F401  # ZeRO's optimizer check imports it (torch._dynamo)
    return module


def _pipeline_dp_rank(rank: int, world: int, folder: str, pp: int, micro_batch: int, microbatches: int,
                      steps: int) -> dict[str, Any]:
    """One rank: ``pipeline_module.py`` and ``ds_config.json`` as written, its replica's share, ``1 + steps`` batches."""
    import torch

    deepspeed = worker._setup(rank, world)
    written = worker._load(folder, "pipeline_module.py")
    layers = list(worker.model())
    names = {parameter: f"{index}.{name}" for index, layer in enumerate(layers)
             for name, parameter in layer.named_parameters()}
    module = written.PlannedPipelineModule(layers=layers, num_stages=pp, loss_fn=worker.loss_fn,
                                           activation_checkpoint_interval=written.ACTIVATION_CHECKPOINT_INTERVAL)
    engine, *_ = deepspeed.initialize(model=module, model_parameters=list(module.parameters()),
                                      optimizer=torch.optim.AdamW(module.parameters(), lr=1e-2),
                                      config=os.path.join(folder, "ds_config.json"))
    held = [p for p in module.parameters()]
    captured = worker._capture(engine, {p: n for p, n in names.items() if any(p is q for q in held)})
    dp, replica = engine.grid.get_data_parallel_world_size(), engine.grid.get_data_parallel_rank()
    share = micro_batch * microbatches
    inputs, target = worker.data(share * dp)
    mine = slice(replica * share, (replica + 1) * share)
    losses, first = [], {}
    for step in range(1 + steps):
        batch = zip(inputs[mine].chunk(microbatches), target[mine].chunk(microbatches))
        losses.append(float(engine.train_batch(data_iter=iter(batch))))
        if step == 0:
            first = {name: grad.clone() for name, grad in captured.items()}
    return {**worker._report(engine), "stage": engine.stage_id, "replica": replica, "dp": dp,
            "optimizer": type(engine.optimizer).__name__, "parts": list(module.parts), "losses": losses,
            "grads": first}


def test_zero1_pipeline_with_data_parallelism_trains_as_one_process(deepspeed, tmp_path: Path):
    from pipeplan.runtime import spawn

    for file in export_files(PLAN, "deepspeed"):
        (tmp_path / file.name).write_text(file.text)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds_config.json", "pipeline_module.py"]
    before = live_children()
    ranks = spawn(_pipeline_dp_rank, PLAN.pp * PLAN.dp, str(tmp_path), PLAN.pp, PLAN.micro_batch_size,
                  PLAN.num_microbatches, _STEPS, timeout=120)
    assert live_children() <= before  # every rank ended
    # DeepSpeed's PipeDataParallelTopology: rank = stage · dp + replica
    assert [(r["stage"], r["replica"], r["dp"]) for r in ranks] == [(0, 0, 2), (0, 1, 2), (1, 0, 2), (1, 1, 2)]
    loss, expected = worker.reference(PLAN.num_layers, PLAN.global_batch, PLAN.num_microbatches * PLAN.dp)
    got: dict[str, Any] = {}
    for result in ranks:
        assert result["parts"] == deepspeed_parts(PLAN) == [0, 1, 4]
        assert (result["zero_stage"], result["micro_batch"], result["accumulation"], result["train_batch"]) == \
            (zero_stage("zero1"), 2, 4, PLAN.global_batch)
        assert result["bf16"] and result["optimizer"] == "DeepSpeedZeroOptimizer"  # ZeRO's own, stage 1
        # train_batch's loss is the mean over the data-parallel replicas: one process's over the global batch
        assert result["losses"][0] == pytest.approx(loss, rel=_BF16)
        assert result["losses"][-1] < result["losses"][0]
        for name, grad in result["grads"].items():  # both replicas of a stage hold the same averaged gradient
            if name in got:
                assert float((got[name] - grad).abs().max()) <= _BF16 * float(grad.abs().max()), name
            got[name] = grad
    assert set(got) == set(expected)
    for name, grad in expected.items():
        assert float((got[name] - grad).abs().max()) <= _BF16 * float(grad.abs().max()), name

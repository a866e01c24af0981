"""One rank of DeepSpeed running pipeplan's exported files as written, on CPU (gloo), and its one-process reference.

    from pipeplan.runtime import spawn
    from tests._deepspeed_worker import plain_rank, pipeline_rank, reference
    results = spawn(plain_rank, 2, folder, b, m)           # deepspeed_train.py + ds_config.json, 2 gloo ranks
    results = spawn(pipeline_rank, 2, folder, b, m)        # pipeline_module.py + ds_config.json
    loss, grads = reference(num_layers, b * m * dp, m * dp)

Each rank loads the export folder's own files (``deepspeed_train.py`` or
``pipeline_module.py``, and ``ds_config.json`` through them), builds the tiny model
below (the same seed on every rank and in the reference), runs one training step and
returns what DeepSpeed reports of the config (ZeRO stage, micro batch, accumulation,
bf16), the step's mean loss and every parameter's gradient as DeepSpeed held it just
before its optimizer stepped (``deepspeed.utils.safe_get_full_grad``: averaged over the
data-parallel ranks and the microbatches, in fp32).

DeepSpeed on CPU: ``DS_ACCELERATOR=cpu`` (its CPU accelerator falls back to gloo
without oneCCL), the launcher's environment variables (``RANK``, ``WORLD_SIZE``,
``LOCAL_RANK``, ``MASTER_ADDR``, ``MASTER_PORT``) for ``init_distributed``, and its
shared-memory all-reduce op left out: ``TorchBackend`` would JIT-compile it (a C++
build of minutes) after probing every op with the compiler.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

WIDTH, LAYERS, SEED = 8, 4, 0


def model(num_layers: int = LAYERS) -> Any:
    """``num_layers`` of Linear + Tanh, fp32, the same weights for every caller."""
    import torch

    torch.manual_seed(SEED)
    return torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), torch.nn.Tanh())
                                 for _ in range(num_layers)])


def data(global_batch: int) -> tuple[Any, Any]:
    """The step's inputs and targets, ``global_batch`` samples, bf16 (what the export trains in)."""
    import torch

    generator = torch.Generator().manual_seed(1)
    inputs = torch.randn(global_batch, WIDTH, generator=generator)
    target = torch.randn(global_batch, WIDTH, generator=generator)
    return inputs.bfloat16(), target.bfloat16()


def loss_fn(output: Any, target: Any) -> Any:
    """Mean squared error over a microbatch."""
    import torch

    return torch.nn.functional.mse_loss(output, target)


def reference(num_layers: int, global_batch: int, microbatches: int) -> tuple[float, dict[str, Any]]:
    """One process: the model in bf16, each of ``microbatches`` equal microbatches' mean loss backward, fp32 mean.

    Returns the mean loss and every parameter's gradient (``"{layer}.{name}"``), averaged over the microbatches.
    """
    import torch

    net = model(num_layers).bfloat16()
    inputs, target = data(global_batch)
    grads: dict[str, Any] = {}
    losses = []
    for x, y in zip(inputs.chunk(microbatches), target.chunk(microbatches)):
        net.zero_grad()
        loss = loss_fn(net(x), y)
        loss.backward()
        losses.append(loss.item())
        for name, parameter in net.named_parameters():
            grads[name] = grads.get(name, 0) + parameter.grad.float() / microbatches
    return sum(losses) / len(losses), grads


def _setup(rank: int, world: int) -> Any:
    """The launcher's environment for ``deepspeed.init_distributed`` over the group :func:`pipeplan.runtime.spawn`
    made, and DeepSpeed's shared-memory op left out (module doc)."""
    import torch.distributed as dist

    os.environ.update(DS_ACCELERATOR="cpu", RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world),
                      MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ.get("MASTER_PORT", "29500"))
    assert dist.is_initialized()
    import deepspeed
    import deepspeed.ops

    deepspeed.ops.__dict__["__compatible_ops__"] = {"deepspeed_shm_comm": False}
    deepspeed.init_distributed()  # over the gloo group already there (a PipelineModule needs it before initialize)
    return deepspeed


def _load(folder: str, name: str) -> Any:
    """The export's own Python file ``name`` as a module."""
    spec = importlib.util.spec_from_file_location(Path(name).stem, os.path.join(folder, name))
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _capture(engine: Any, names: dict[Any, str]) -> dict[str, Any]:
    """Record each parameter's full gradient when the engine's optimizer steps (before it does)."""
    from deepspeed.utils import safe_get_full_grad

    captured: dict[str, Any] = {}
    optimizer = engine.optimizer
    step = optimizer.step

    def recording_step(*args: Any, **kwargs: Any) -> Any:
        for parameter, name in names.items():
            grad = safe_get_full_grad(parameter)
            if grad is not None:
                captured[name] = grad.detach().float().clone()
        return step(*args, **kwargs)

    optimizer.step = recording_step
    return captured


def _report(engine: Any) -> dict[str, Any]:
    return {"zero_stage": int(engine.zero_optimization_stage()), "micro_batch": engine.train_micro_batch_size_per_gpu(),
            "accumulation": engine.gradient_accumulation_steps(), "train_batch": engine.train_batch_size(),
            "bf16": bool(engine.bfloat16_enabled())}


def plain_rank(rank: int, world: int, folder: str, micro_batch: int, microbatches: int) -> dict[str, Any]:
    """``deepspeed_train.py`` as written: ``initialize(model)`` and ``train_step`` on this rank's share of the batch."""
    _setup(rank, world)
    train = _load(folder, "deepspeed_train.py")
    net = model()
    names = {parameter: name for name, parameter in net.named_parameters()}
    engine = train.initialize(net)
    captured = _capture(engine, names)
    per_rank = micro_batch * microbatches
    inputs, target = data(per_rank * world)
    mine = slice(rank * per_rank, (rank + 1) * per_rank)
    batches = list(zip(inputs[mine].chunk(microbatches), target[mine].chunk(microbatches)))
    loss = train.train_step(engine, batches, loss_fn)
    return {**_report(engine), "loss": float(loss), "grads": captured}


def pipeline_rank(rank: int, world: int, folder: str, micro_batch: int, microbatches: int) -> dict[str, Any]:
    """``pipeline_module.py`` as written: ``PlannedPipelineModule`` over the model's layers, one ``train_batch``."""
    import torch

    deepspeed = _setup(rank, world)
    written = _load(folder, "pipeline_module.py")
    net = model()
    layers = list(net)
    names = {parameter: f"{index}.{name}" for index, layer in enumerate(layers)
             for name, parameter in layer.named_parameters()}
    module = written.PlannedPipelineModule(layers=layers, num_stages=world, loss_fn=loss_fn,
                                           activation_checkpoint_interval=written.ACTIVATION_CHECKPOINT_INTERVAL)
    held = len([layer for layer in module.forward_funcs if isinstance(layer, torch.nn.Module)])
    engine, *_ = deepspeed.initialize(model=module, model_parameters=[p for p in module.parameters()],
                                      optimizer=torch.optim.AdamW(module.parameters(), lr=1e-4),
                                      config=os.path.join(folder, "ds_config.json"))
    captured = _capture(engine, {p: n for p, n in names.items() if any(p is q for q in module.parameters())})
    inputs, target = data(micro_batch * microbatches)
    loss = engine.train_batch(data_iter=iter(zip(inputs.chunk(microbatches), target.chunk(microbatches))))
    return {**_report(engine), "parts": list(module.parts), "layers_held": held, "loss": float(loss),
            "grads": captured}

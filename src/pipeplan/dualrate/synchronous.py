"""The synchronous baseline on one rank: the two modules as an ordinary two-stage pipeline.

    from pipeplan.dualrate.synchronous import synchronous_rank
    run = synchronous_rank(rank, DualRateConfig(method="synchronous"), transport)   # in each of 2 processes
    run                                # the DualRateRun on rank 1, None on rank 0

Both sides run and update every step with exact gradients
(:class:`~pipeplan.runtime.PipelineRuntime`, 1F1B over 2 stages, ``sync_microbatches``
microbatches); the vision stage sees the step's camera frame. The held-out latents go
to the action rank as one ``act`` packet on the runtime's wire (``transport``, a
:class:`~pipeplan.runtime.p2p.LinkTransport` over the link groups). torch (imported on call).
"""

from __future__ import annotations

import time
from typing import Any

from ..runtime.p2p import LinkTransport, Packet, encode_header
from .config import DualRateConfig
from .result import DualRateRun
from .training import build_parts, make_optimizer, mse

__all__ = ["synchronous_rank"]


def synchronous_rank(rank: int, config: DualRateConfig, transport: LinkTransport) -> DualRateRun | None:
    """The baseline: both sides every step, exact gradients (PipelineRuntime, 1F1B over 2 stages)."""
    import torch
    import torch.distributed as dist

    from .policy import synchronous_model
    from ..schedules import build_schedule
    from ..runtime.executor import PipelineRuntime

    task, head, stages, encoder = build_parts(config)
    model = synchronous_model(encoder, head)
    schedule = build_schedule("1f1b", num_stages=2, num_microbatches=config.sync_microbatches)
    runtime = PipelineRuntime([model[0], model[1]], schedule, mse)
    params = list(model[rank].parameters())
    optimizer = make_optimizer(params, config)
    image_shape = (config.num_envs, 3, config.image_size, config.image_size)
    placeholder = torch.zeros(image_shape)
    curve: list[tuple[float, int, float]] = []
    records: list[tuple[int, str, int, int, float, float, float]] = []
    flag = torch.zeros(1)
    dist.barrier()
    t0 = time.perf_counter()
    step = 0
    while True:
        began = (time.perf_counter() - t0) * 1e3
        images = task.frame(step // config.camera_period) if rank == 0 else placeholder
        fast, target = task.step(step)
        result = runtime.step((images, fast), target)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        step += 1
        now = time.perf_counter() - t0
        records.append((rank, "step", rank, step - 1, began, now * 1e3, float("nan")))
        curve.append((now, step * config.num_envs, float(result.loss)))
        if rank == 0:
            done = step >= config.max_frames * config.rate_ratio or (
                config.time_budget is not None and now >= config.time_budget
            )
            flag.fill_(float(done))
        dist.broadcast(flag, 0)
        if flag.item() > 0.5:
            break
    wall = time.perf_counter() - t0
    images, fast, target = task.held_out(config.eval_samples)
    cpu = torch.device("cpu")
    with torch.no_grad():
        if rank == 0:
            latent = encoder(images)
            transport.send(1, [latent], header=encode_header([latent], cpu))
            transport.finish()
        else:
            specs, _tuple = transport.receive_header(0, Packet("hdr", 0, step), cpu, config.num_envs)
            latent = transport.wait(0, Packet("act", 0, step), transport.post(0, specs, cpu))[0]
        final = float(mse(head(torch.cat([latent, fast], dim=1)), target))
    weights = {}
    if config.return_weights:
        part, module = ("encoder", encoder) if rank == 0 else ("head", head)
        weights = {f"{part}.{n}": p.detach().clone() for n, p in module.named_parameters()}
    gathered: list[Any] = [None] * 2
    dist.all_gather_object(gathered, (records, weights))
    if rank != 1:
        return None
    return DualRateRun(config, step, step, wall, curve, final, {0: [0] * step},
                       sorted((row for rows, _w in gathered for row in rows), key=lambda r: r[4]),
                       {name: value for _rows, part in gathered for name, value in part.items()})

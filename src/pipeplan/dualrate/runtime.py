"""The dual-rate asynchronous pipeline on real processes (torch.distributed).

Vision ranks ``0..V-1`` run the vision encoder's stages once per camera frame;
the action rank ``V`` runs the action head once per control step, ``k`` steps
per frame. Each rank walks its order of :class:`~pipeplan.schedules.dual_rate.DualRateShape`
(the same orders the simulator runs)::

    from pipeplan.dualrate.runtime import DualRateConfig, run_dual_rate
    run = run_dual_rate(DualRateConfig(rate_ratio=4, damping=0.95, time_budget=5.0))
    run.samples_per_s, run.final_loss, run.staleness[0]

The processes, their timeout and the naming of a rank that fails, dies or hangs
are :func:`pipeplan.runtime.spawn`'s; the messages are the pipeline runtime's
packets (:class:`pipeplan.runtime.p2p.LinkTransport`, one process group per
directed link, so the latent and its gradient never queue behind each other):

* latent, vision ``V-1`` → action, ``act(V-1, j)``: ``isend`` right after the
  forward (the vision rank never waits for the action rank to take it); the action
  rank posts the receive of frame ``j + 1`` as soon as it starts frame ``j``. The
  packet carries the tag ``(frame, weight version, last)`` after the tensor.
* latent gradient, action → vision ``V-1``, ``grad(V, j)``: summed over the frame's
  ``k`` steps, sent with ``isend`` after the window's last backward. The vision
  rank keeps the weight version each forward ran on, computes
  ``Δt = its version now − that version`` and scales its weight gradient by
  ``λ^Δt`` (``staleness_scaling="damping"``) or ``1 / max(Δt, 1)`` (``"inverse"``,
  the staleness-aware ASGD learning rate α/Δt) before its update ``U``.

Weight stashing (``stash_weights=True``, PipeDream's): the forward runs on a
snapshot of the stage's weights and keeps its graph, so the stale gradient is
exactly the gradient at the weights that produced the latent. Without it the
backward recomputes the forward on the current weights (cheaper in memory,
one more forward in time). ``train_vision=False`` freezes the encoder: the action
rank returns only an acknowledgement per frame (flow control), no gradient.

``method="synchronous"`` runs the baseline instead: the same two modules as an
ordinary two-stage pipeline (:class:`~pipeplan.runtime.PipelineRuntime`, 1F1B)
that runs the vision stage on every step's batch and updates both sides every
step with exact gradients. With ``rate_ratio=1, max_staleness=0, damping=1`` the
dual-rate run computes exactly the synchronous pipeline's gradients (tested).

This module launches the processes; the parts live beside it: :mod:`.config`
(:class:`DualRateConfig`), :mod:`.result` (:class:`DualRateRun`), :mod:`.worker`
(one rank of a dual-rate run), :mod:`.synchronous` (one rank of the baseline),
:mod:`.reference` (the single-process replay), :mod:`.costs` (per-action costs)
and :mod:`.training` (the task, networks and optimizer they all build).
"""

from __future__ import annotations

from ..errors import InvalidInputError
from .config import DualRateConfig
from .costs import DualRateCosts, measure_dual_rate_costs
from .reference import replay_dual_rate
from .result import DualRateRun
from .synchronous import synchronous_rank
from .worker import DualRateRank

__all__ = [
    "DualRateConfig",
    "DualRateCosts",
    "DualRateRun",
    "execute_dual_rate",
    "measure_dual_rate_costs",
    "replay_dual_rate",
    "run_dual_rate",
    "run_dual_rate_configs",
]


def run_dual_rate(config: DualRateConfig, *, timeout: float = 120.0) -> DualRateRun:
    """Start ``config.world_size`` CPU processes (gloo), run ``config``, return the action rank's result."""
    return run_dual_rate_configs([config], timeout=timeout)[0]


def run_dual_rate_configs(configs: list[DualRateConfig], *, timeout: float = 120.0,
                          backend: str = "gloo") -> list[DualRateRun]:
    """Run several configurations one after the other in one set of processes (saves start-up time).

    Raises:
        InvalidInputError: configurations with different numbers of vision stages.
    """
    from ..runtime.launch import spawn

    if not configs:
        return []
    sizes = {config.world_size for config in configs}
    if len(sizes) != 1:
        raise InvalidInputError(f"configurations in one launch must have the same world size, got {sorted(sizes)}")
    world = sizes.pop()
    results = spawn(execute_dual_rate, world, list(configs), backend=backend, timeout=timeout)
    runs: list[DualRateRun] = results[world - 1]
    return runs


def execute_dual_rate(rank: int, world_size: int, configs: list[DualRateConfig]) -> list[DualRateRun] | None:
    """One rank's work for every configuration (collective over the world); the action rank returns the runs."""
    import torch.distributed as dist

    from ..runtime.faults import FaultMonitor
    from ..runtime.grid import link_groups
    from ..runtime.p2p import LinkTransport

    vision = world_size - 1
    links = [(s, s + 1) for s in range(vision)] + [(s + 1, s) for s in range(vision)]
    monitor = FaultMonitor.ensure(rank)
    with monitor.phase_of("connecting the links", collective=True):
        transport = LinkTransport(rank, link_groups(links, connect=True), list(range(world_size)))
    out: list[DualRateRun] = []
    for config in configs:
        if config.world_size != world_size:
            raise InvalidInputError(f"configuration needs {config.world_size} processes, the world has {world_size}")
        with monitor.phase_of("the configuration's barrier", collective=True):
            dist.barrier()
        if config.method == "synchronous":
            run = synchronous_rank(rank, config, transport)
        else:
            run = DualRateRank(rank, config, transport).run()
        if run is not None:  # the action rank's result; the others return None
            out.append(run)
    return out if rank == vision else None

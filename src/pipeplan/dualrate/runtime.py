"""The dual-rate asynchronous pipeline on real processes (torch.distributed).

Vision ranks ``0..V-1`` run the vision encoder's stages once per camera frame;
the action rank ``V`` runs the action head once per control step, ``k`` steps
per frame. Each rank walks its order of :class:`~pipeplan.schedules.dual_rate.DualRateShape`
(the same orders the simulator runs)::

    from pipeplan.dualrate.runtime import DualRateConfig, run_dual_rate
    run = run_dual_rate(DualRateConfig(rate_ratio=4, damping=0.95, time_budget=5.0))
    run.samples_per_s, run.final_loss, run.staleness[0]

What travels (one gloo process group per directed link, so the latent and
its gradient never queue behind each other):

* latent, vision ``V-1`` → action: ``isend`` right after the forward (the vision
  rank never waits for the action rank to take it); the action rank posts the
  receive of frame ``j + 1`` as soon as it starts frame ``j``. The message
  carries ``(frame, weight version, last)`` ahead of the tensor.
* latent gradient, action → vision ``V-1``: summed over the frame's ``k`` steps,
  sent with ``isend`` after the window's last backward, tagged with the weight
  version that produced the latent. The vision rank computes
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
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any

from .._validation import non_negative_float, positive_float, positive_int
from ..errors import InvalidInputError
from ..schedules.dual_rate import DualRateShape, check_damping

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

_METHODS = ("dual-rate", "synchronous")
_SCALINGS = ("damping", "inverse")
_HEADER = 3  # frame, weight version, last-frame flag


@dataclass(frozen=True)
class DualRateConfig:
    """One training run of the dual-rate (or the synchronous) pipeline on the temporal task.

    Args:
        method: ``"dual-rate"`` or ``"synchronous"``.
        rate_ratio: action steps per vision update, an integer ``k >= 1``.
        camera_ratio: control steps per camera frame of the task (default ``rate_ratio``);
            a multiple of ``rate_ratio``. ``rate_ratio=1, max_staleness=0`` on a
            ``camera_ratio=4`` task is the synchronous pipeline: the vision stage runs
            (and updates) on every step, on the same image four steps in a row.
        num_vision_stages: vision ranks ``V`` (the encoder's children are split evenly).
        max_staleness: frames the vision side may run ahead (0: no overlap).
        buffer_frames: latent slots on the action side (default ``max_staleness + 1``).
        damping: λ in (0, 1] of the ``λ^Δt`` damping (``staleness_scaling="damping"``).
        staleness_scaling: ``"damping"`` (λ^Δt) or ``"inverse"`` (1/Δt).
        stash_weights: keep the forward's weights for the stale backward (PipeDream).
        train_vision: ``False`` freezes the encoder at its initial weights.
        lr, momentum: SGD on both sides (the same for every method).
        max_frames: at most this many frames (the run has ``k`` steps per frame).
        time_budget: seconds of training after which vision rank 0 marks the frame
            it is computing as the last one (``None``: run ``max_frames``).
        sync_microbatches: microbatches per step of the synchronous pipeline.
        num_envs, image_size, channels, conv_blocks: task batch and model size.
        eval_samples: held-out samples for the final loss.
        seed: task and initialisation.
        return_weights: put the final weights of both sides in the result (for tests).
        name: a label for reports.
    """

    method: str = "dual-rate"
    rate_ratio: int = 4
    camera_ratio: int | None = None
    num_vision_stages: int = 1
    max_staleness: int = 1
    buffer_frames: int | None = None
    damping: float = 1.0
    staleness_scaling: str = "damping"
    stash_weights: bool = True
    train_vision: bool = True
    lr: float = 0.05
    momentum: float = 0.9
    max_frames: int = 100
    time_budget: float | None = None
    sync_microbatches: int = 2
    num_envs: int = 32
    image_size: int = 24
    channels: int = 16
    conv_blocks: int = 2
    eval_samples: int = 256
    seed: int = 0
    return_weights: bool = False
    name: str = ""

    def __post_init__(self) -> None:
        if self.method not in _METHODS:
            raise InvalidInputError(f"method must be one of {', '.join(_METHODS)}, got {self.method!r}")
        if self.staleness_scaling not in _SCALINGS:
            raise InvalidInputError(
                f"staleness_scaling must be one of {', '.join(_SCALINGS)}, got {self.staleness_scaling!r}"
            )
        object.__setattr__(self, "damping", check_damping(self.damping))
        vision_layers = positive_int("conv_blocks", self.conv_blocks) + 1
        stages = positive_int("num_vision_stages", self.num_vision_stages)
        if stages > vision_layers:
            raise InvalidInputError(
                f"num_vision_stages = {stages} is more than the {vision_layers} vision layers "
                f"({self.conv_blocks} conv blocks + the projection); use at most {vision_layers}"
            )
        if self.method == "synchronous" and stages != 1:
            raise InvalidInputError(f"the synchronous baseline runs one vision stage, got num_vision_stages = {stages}")
        self.shape()  # rate ratio, staleness and buffer checks
        camera = positive_int("camera_ratio", self.camera_period)
        if camera % self.rate_ratio:
            raise InvalidInputError(
                f"camera_ratio = {camera} must be a multiple of rate_ratio = {self.rate_ratio} "
                "(a vision update must not straddle two camera frames)"
            )
        positive_int("sync_microbatches", self.sync_microbatches)
        if self.sync_microbatches > self.num_envs:
            raise InvalidInputError(
                f"sync_microbatches = {self.sync_microbatches} must be <= num_envs = {self.num_envs}"
            )
        positive_float("lr", self.lr)
        non_negative_float("momentum", self.momentum)
        if self.time_budget is not None:
            positive_float("time_budget", self.time_budget, unit="seconds")
        positive_int("eval_samples", self.eval_samples)
        positive_int("image_size", self.image_size, minimum=8)
        positive_int("channels", self.channels)

    def shape(self, num_frames: int | None = None) -> DualRateShape:
        """The schedule shape this run walks (one action rank)."""
        return DualRateShape(self.num_vision_stages, 1, self.rate_ratio, num_frames or self.max_frames,
                             self.max_staleness, self.buffer_frames)

    @property
    def camera_period(self) -> int:
        """Control steps per camera frame: ``camera_ratio``, or ``rate_ratio`` when not given."""
        return self.rate_ratio if self.camera_ratio is None else self.camera_ratio

    @property
    def world_size(self) -> int:
        """Processes: ``V`` vision ranks and one action rank."""
        return self.num_vision_stages + 1

    def gradient_scale(self, staleness: int) -> float:
        """The factor a gradient of staleness ``Δt`` is multiplied by."""
        if self.staleness_scaling == "inverse":
            return 1.0 / max(staleness, 1)
        return self.damping**staleness


@dataclass
class DualRateRun:
    """What one run measured (on the action rank, plus every rank's records).

    Attributes:
        config: the run's configuration.
        steps, frames: action steps and frames trained.
        wall_s: seconds from the start barrier to the action rank's last update.
        curve: per action step ``(seconds since start, samples so far, training loss)``;
            the training loss is the step's loss before its update, on fresh samples.
        final_loss: held-out mean squared error with the final weights.
        staleness: per vision stage, the measured Δt of every frame's gradient.
        records: ``(rank, kind, stage, index, start_ms, end_ms, cpu_ms)`` of every action:
            wall-clock start and end (ms since the start barrier; the start is taken
            after the action's message arrived, so waiting is not counted) and the
            rank's thread CPU time spent in it (what it would take on an idle core).
        weights: with ``config.return_weights``, ``"encoder.<name>"`` and ``"head.<name>"``
            final parameters (encoder names as in the unsplit encoder).
    """

    config: DualRateConfig
    steps: int
    frames: int
    wall_s: float
    curve: list[tuple[float, int, float]]
    final_loss: float
    staleness: dict[int, list[int]] = field(default_factory=dict)
    records: list[tuple[int, str, int, int, float, float, float]] = field(default_factory=list)
    weights: dict[str, Any] = field(default_factory=dict)

    @property
    def samples_per_s(self) -> float:
        """Training samples (action side) per second of wall time."""
        return self.steps * self.config.num_envs / self.wall_s

    @property
    def frames_per_s(self) -> float:
        """Vision forward batches per second (the synchronous pipeline runs one per step)."""
        return self.frames / self.wall_s

    def stage_costs(self) -> dict[int, tuple[float, float, float]]:
        """Per stage, mean CPU ms of its ``F``, ``B`` and ``U`` (dual-rate runs; 0 for a kind it never ran)."""
        sums: dict[tuple[int, str], list[float]] = {}
        for _rank, kind, stage, _index, _start, _end, cpu in self.records:
            sums.setdefault((stage, kind), []).append(cpu)
        stages = sorted({stage for stage, _kind in sums})
        return {s: tuple(sum(sums.get((s, k), [0.0])) / len(sums.get((s, k), [0.0])) for k in "FBU")  # type: ignore[misc]
                for s in stages}

    def timeline(self) -> Any:
        """The measured :class:`~pipeplan.timeline.Timeline` of a dual-rate run (ms; on its schedule).

        Raises:
            InvalidInputError: a synchronous-pipeline run (it has no dual-rate schedule).
        """
        import numpy as np

        from ..schedule import Action
        from ..schedules.dual_rate import DualRateSchedule
        from ..timeline import Timeline

        if self.config.method != "dual-rate":
            raise InvalidInputError("only a dual-rate run has a dual-rate timeline")
        schedule = DualRateSchedule(self.config.shape(self.frames))
        offsets = np.concatenate([[0], np.cumsum([len(order) for order in schedule.orders])])
        start = np.zeros(schedule.num_actions)
        end = np.zeros(schedule.num_actions)
        for _rank, kind, stage, index, began, ended, _cpu in self.records:
            rank, position = schedule.position(Action(kind, stage, index))
            start[offsets[rank] + position] = began
            end[offsets[rank] + position] = ended
        return Timeline(schedule, start, end, source="measured")

    def staleness_histogram(self) -> dict[int, int]:
        """Δt → number of gradients, over all vision stages."""
        counts: Counter[int] = Counter()
        for values in self.staleness.values():
            counts.update(values)
        return dict(sorted(counts.items()))

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready summary (no per-action records)."""
        return {
            "config": asdict(self.config), "steps": self.steps, "frames": self.frames, "wall_s": self.wall_s,
            "samples_per_s": self.samples_per_s, "frames_per_s": self.frames_per_s,
            "final_loss": self.final_loss, "staleness_histogram": self.staleness_histogram(),
            "curve": self.curve,
        }


# ------------------------------------------------------------------- launching
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

    from ..runtime.grid import link_groups

    vision = world_size - 1
    links = [(s, s + 1) for s in range(vision)] + [(s + 1, s) for s in range(vision)]
    groups = link_groups(links)
    out: list[DualRateRun] = []
    for config in configs:
        if config.world_size != world_size:
            raise InvalidInputError(f"configuration needs {config.world_size} processes, the world has {world_size}")
        dist.barrier()
        if config.method == "synchronous":
            run = _synchronous_rank(rank, config)
        else:
            run = _DualRateRank(rank, config, groups).run()
        if run is not None:  # the action rank's result; the others return None
            out.append(run)
    return out if rank == vision else None


# ------------------------------------------------------------ the reference
def replay_dual_rate(config: DualRateConfig) -> dict[str, Any]:
    """The dual-rate algorithm of ``config`` in this one process; its final weights.

    The reference the distributed run must equal (one vision stage): the first
    ``L + 1`` forwards on stashed copies of the weights, then per frame ``j`` the
    frame's ``k`` action steps (forward, backward, update each), the stashed
    vision backward with the window's summed latent gradient scaled by
    ``config.gradient_scale(Δt)``, the vision update, and the forward of frame
    ``j + L + 1``. Without stashing the backward recomputes on the current weights.

    Returns:
        ``{"encoder.<name>": tensor, "head.<name>": tensor}`` like :attr:`DualRateRun.weights`.

    Raises:
        InvalidInputError: a synchronous-pipeline configuration, or more than one vision stage.
    """
    import torch

    if config.method != "dual-rate" or config.num_vision_stages != 1:
        raise InvalidInputError("replay_dual_rate replays dual-rate runs with one vision stage")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as on the ranks: the same kernels sum in the same order
    try:
        return _replay(config)
    finally:
        torch.set_num_threads(threads)


def _replay(config: DualRateConfig) -> dict[str, Any]:
    import torch
    from torch.func import functional_call

    task, head, _stages, encoder = _build(config)
    vision_opt = _optimizer(list(encoder.parameters()), config) if config.train_vision else None
    action_opt = _optimizer(list(head.parameters()), config)
    if not config.train_vision:
        for param in encoder.parameters():
            param.requires_grad_(False)
    frames, ahead, ratio = config.max_frames, config.max_staleness, config.rate_ratio
    held: dict[int, tuple[Any, Any, Any, int]] = {}
    version = 0

    def forward(frame: int) -> None:
        images = task.frame(frame * ratio // config.camera_period)
        if config.train_vision and config.stash_weights:
            snapshot = {n: p.detach().clone().requires_grad_(True) for n, p in encoder.named_parameters()}
            held[frame] = (images, snapshot, functional_call(encoder, snapshot, (images,)), version)
        else:
            with torch.no_grad():
                held[frame] = (images, None, encoder(images), version)

    for frame in range(min(ahead + 1, frames)):
        forward(frame)
    for frame in range(frames):
        images, snapshot, latent, made_at = held.pop(frame)
        read = latent.detach().requires_grad_(config.train_vision)
        for step in range(frame * ratio, (frame + 1) * ratio):
            fast, target = task.step(step)
            _mse(head(torch.cat([read, fast], dim=1)), target).backward()
            action_opt.step()
            action_opt.zero_grad(set_to_none=True)
        if vision_opt is not None:
            if snapshot is not None:
                torch.autograd.backward(latent, read.grad)
                for name, param in encoder.named_parameters():
                    param.grad = snapshot[name].grad
            else:
                torch.autograd.backward(encoder(images), read.grad)
            scale = config.gradient_scale(version - made_at)
            for param in encoder.parameters():
                param.grad.mul_(scale)
            vision_opt.step()
            vision_opt.zero_grad(set_to_none=True)
        version += 1
        if frame + ahead + 1 < frames:
            forward(frame + ahead + 1)
    weights = {f"encoder.{n}": p.detach().clone() for n, p in encoder.named_parameters()}
    weights.update({f"head.{n}": p.detach().clone() for n, p in head.named_parameters()})
    return weights


# ---------------------------------------------------------------- calibration
@dataclass(frozen=True)
class DualRateCosts:
    """CPU milliseconds of each action of the dual-rate policy, measured in isolation (one thread).

    Attributes:
        vision: ``(F, B, U)`` of the whole encoder on one frame with weight stashing.
        vision_recompute_backward: ``B`` without stashing (the forward runs again).
        vision_frozen_forward: ``F`` of the frozen encoder (no graph).
        action: ``(F, B, U)`` of the head on one step.
    """

    vision: tuple[float, float, float]
    vision_recompute_backward: float
    vision_frozen_forward: float
    action: tuple[float, float, float]

    def period(self, config: DualRateConfig) -> float:
        """Steady-state ms per vision update of ``config`` on idle cores (one vision stage, free messages).

        :func:`pipeplan.analytic.dual_rate_period`; a frozen encoder has no ``B``/``U``,
        no stashing means the recomputing ``B``.
        """
        from ..analytic import dual_rate_period

        forward, backward, update = self.vision
        if not config.train_vision:
            forward, backward, update = self.vision_frozen_forward, 0.0, 0.0
        elif not config.stash_weights:
            backward = self.vision_recompute_backward
        return dual_rate_period([(forward, backward, update)], [self.action], rate_ratio=config.rate_ratio,
                                max_staleness=config.max_staleness)

    def samples_per_s(self, config: DualRateConfig) -> float:
        """Action-side samples per second of ``config`` on idle cores."""
        return config.rate_ratio * config.num_envs / (self.period(config) / 1e3)


def measure_dual_rate_costs(config: DualRateConfig, *, repeats: int = 15) -> DualRateCosts:
    """Time every action of ``config``'s policy in this process: the minimum CPU time over ``repeats``.

    Runs on one thread (the runtime's ranks each have one); the minimum is robust to
    other load on the machine.
    """
    import torch
    from torch.func import functional_call

    repeats = positive_int("repeats", repeats)
    task, head, _stages, encoder = _build(config)
    images = task.frame(0)
    fast, target = task.step(0)
    vision_opt = _optimizer(list(encoder.parameters()), config)
    action_opt = _optimizer(list(head.parameters()), config)
    params = dict(encoder.named_parameters())
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    timings: dict[str, list[float]] = {}

    def timed(name: str, work: Any) -> Any:
        began = time.thread_time()
        value = work()
        timings.setdefault(name, []).append((time.thread_time() - began) * 1e3)
        return value

    try:
        for _ in range(repeats + 1):  # the first round warms up
            snapshot = timed("vF", lambda: {n: p.detach().clone().requires_grad_(True) for n, p in params.items()})
            latent = timed("vF+", lambda: functional_call(encoder, snapshot, (images,)))
            gradient = torch.ones_like(latent) / latent.numel()
            timed("vB", lambda: torch.autograd.backward(latent, gradient))
            for name, param in params.items():
                param.grad = snapshot[name].grad
            timed("vU", lambda: (vision_opt.step(), vision_opt.zero_grad(set_to_none=True)))
            timed("vR", lambda: torch.autograd.backward(encoder(images), gradient))
            vision_opt.zero_grad(set_to_none=True)
            with torch.no_grad():
                timed("vN", lambda: encoder(images))
            read = latent.detach().requires_grad_(True)
            loss = timed("aF", lambda: _mse(head(torch.cat([read, fast], dim=1)), target))
            timed("aB", lambda: loss.backward())
            timed("aU", lambda: (action_opt.step(), action_opt.zero_grad(set_to_none=True)))
    finally:
        torch.set_num_threads(threads)
    best = {name: min(values[1:]) for name, values in timings.items()}
    return DualRateCosts(
        vision=(best["vF"] + best["vF+"], best["vB"], best["vU"]),
        vision_recompute_backward=best["vR"],
        vision_frozen_forward=best["vN"],
        action=(best["aF"], best["aB"], best["aU"]),
    )


# ------------------------------------------------------------------ the model
def _build(config: DualRateConfig) -> tuple[Any, Any, list[Any], Any]:
    """``(task, head, vision stage modules, encoder)``, identical on every rank."""
    from .policy import build_dual_rate_policy
    from .task import TemporalTask
    from ..models import split_sequential
    from ..partition import even_split

    task = TemporalTask(rate_ratio=config.camera_period, num_envs=config.num_envs, image_size=config.image_size,
                        seed=config.seed)
    encoder, head = build_dual_rate_policy(image_size=config.image_size, channels=config.channels,
                                           conv_blocks=config.conv_blocks, seed=config.seed)
    stages = split_sequential(encoder, even_split(len(encoder), config.num_vision_stages))
    return task, head, stages, encoder


def _optimizer(params: list[Any], config: DualRateConfig) -> Any:
    import torch

    return torch.optim.SGD(params, lr=config.lr, momentum=config.momentum)


def _mse(prediction: Any, target: Any) -> Any:
    return ((prediction - target) ** 2).mean()


class _DualRateRank:
    """One rank of a dual-rate run: walks its order of the shape, sends and receives."""

    def __init__(self, rank: int, config: DualRateConfig, groups: dict[tuple[int, int], Any]) -> None:
        import torch

        self.rank = rank
        self.config = config
        self.groups = groups
        self.vision_ranks = config.num_vision_stages
        self.action_rank = self.vision_ranks
        self.task, self.head, self.stages, _encoder = _build(config)
        with torch.no_grad():  # every stage's output shape, for the receivers' buffers
            value = self.task.frame(0)
            self.out_shapes = []
            for module in self.stages:
                value = module(value)
                self.out_shapes.append(tuple(value.shape))
        from torch.func import functional_call  # imported before the clock starts: the first import takes seconds

        self.functional_call = functional_call
        # Optimizers before the clock starts too (the first one imports much of torch).
        if rank == self.action_rank:
            self.optimizer = _optimizer(list(self.head.parameters()), config)
        elif config.train_vision:
            self.optimizer = _optimizer(list(self.stages[rank].parameters()), config)
        else:
            self.optimizer = None
            for param in self.stages[rank].parameters():
                param.requires_grad_(False)
        self.sends: list[tuple[Any, Any]] = []
        self.records: list[tuple[int, str, int, int, float, float, float]] = []
        self.shape = config.shape()

    # ----------------------------------------------------------- messaging
    def _isend(self, tensor: Any, dst: int) -> None:
        import torch.distributed as dist

        tensor = tensor.contiguous()
        self.sends.append((dist.isend(tensor, dst, group=self.groups[(self.rank, dst)]), tensor))
        self.sends = [(work, kept) for work, kept in self.sends if not work.is_completed()]

    def _irecv(self, numel: int, src: int) -> tuple[Any, Any]:
        import torch
        import torch.distributed as dist

        buffer = torch.empty(numel)
        return dist.irecv(buffer, src, group=self.groups[(src, self.rank)]), buffer

    def _recv(self, numel: int, src: int) -> Any:
        work, buffer = self._irecv(numel, src)
        work.wait()
        return buffer

    @staticmethod
    def _pack(header: tuple[float, float, float], tensor: Any) -> Any:
        import torch

        return torch.cat([torch.tensor(header, dtype=torch.float32), tensor.detach().reshape(-1).float()])

    def _finish_sends(self) -> None:
        for work, _kept in self.sends:
            work.wait()
        self.sends = []

    # ---------------------------------------------------------------- run
    def _warm_links(self) -> None:
        """One small message over every link first: gloo connects a pair lazily, at its first message."""
        import torch
        import torch.distributed as dist

        for (src, dst), group in sorted(self.groups.items()):  # the same order on every rank: no deadlock
            if self.rank == src:
                dist.send(torch.zeros(1), dst, group=group)
            elif self.rank == dst:
                dist.recv(torch.zeros(1), src, group=group)

    def run(self) -> DualRateRun | None:
        import torch.distributed as dist

        self._warm_links()
        dist.barrier()
        self.t0 = time.perf_counter()
        if self.rank < self.vision_ranks:
            staleness = self._vision()
            self._finish_sends()
            self._evaluate_vision()
            payload: Any = (self.records, staleness, self._weights())
        else:
            summary = self._action()
            self._finish_sends()
            final = self._evaluate_action()
            payload = (self.records, None, self._weights())
        gathered: list[Any] = [None] * (self.vision_ranks + 1)
        dist.all_gather_object(gathered, payload)
        if self.rank != self.action_rank:
            return None
        steps, frames, wall, curve = summary
        records = [row for rows, _stale, _weights in gathered for row in rows]
        stale = {s: list(gathered[s][1]) for s in range(self.vision_ranks)}
        weights = {name: value for _rows, _stale, part in gathered for name, value in part.items()}
        return DualRateRun(self.config, steps, frames, wall, curve, final, stale,
                           sorted(records, key=lambda r: r[4]), weights)

    def _weights(self) -> dict[str, Any]:
        """This rank's final parameters under their unsplit names (only with ``return_weights``)."""
        if not self.config.return_weights:
            return {}
        if self.rank == self.action_rank:
            return {f"head.{n}": p.detach().clone() for n, p in self.head.named_parameters()}
        offset = sum(len(module) for module in self.stages[: self.rank])
        out = {}
        for name, param in self.stages[self.rank].named_parameters():
            index, rest = name.split(".", 1)
            out[f"encoder.{int(index) + offset}.{rest}"] = param.detach().clone()
        return out

    def _now_ms(self) -> float:
        return (time.perf_counter() - self.t0) * 1e3

    def _truncate(self, position: int, frames: int) -> None:
        """Switch to the order for ``frames`` frames; the part already run is a prefix of it."""
        shorter = self.shape.with_frames(frames)
        if shorter.action_at(self.rank, position) != self.shape.action_at(self.rank, position):  # pragma: no cover
            raise AssertionError(f"rank {self.rank}: the order for {frames} frames does not extend the run so far")
        self.shape = shorter

    # -------------------------------------------------------------- vision
    def _vision(self) -> list[int]:
        import torch

        functional_call = self.functional_call
        config = self.config
        stage = self.rank
        module = self.stages[stage]
        params = dict(module.named_parameters())
        optimizer = self.optimizer
        version = 0
        in_flight: dict[int, dict[str, Any]] = {}
        staleness: dict[int, int] = {}
        position = 0
        downstream = stage + 1  # the next vision rank, or the action rank
        in_numel = math.prod(self.out_shapes[stage - 1]) if stage > 0 else 0
        out_numel = math.prod(self.out_shapes[stage])
        while position < self.shape.order_length(stage):
            kind, _stage, frame = self.shape.action_at(stage, position)
            began, cpu = self._now_ms(), time.thread_time()
            if kind == "F":
                if stage == 0:
                    inputs = self.task.frame(frame * config.rate_ratio // config.camera_period)
                    last = frame == config.max_frames - 1 or (
                        config.time_budget is not None and began / 1e3 >= config.time_budget
                    )
                else:
                    message = self._recv(_HEADER + in_numel, stage - 1)
                    began, cpu = self._now_ms(), time.thread_time()
                    last = bool(message[2] > 0.5)
                    inputs = message[_HEADER:].view(self.out_shapes[stage - 1]).clone()
                entry: dict[str, Any] = {"inputs": inputs, "version": version}
                if config.train_vision and config.stash_weights:
                    snapshot = {n: p.detach().clone().requires_grad_(True) for n, p in params.items()}
                    if stage > 0:
                        inputs.requires_grad_(True)
                    output = functional_call(module, snapshot, (inputs,))
                    entry.update(snapshot=snapshot, output=output)
                else:
                    with torch.no_grad():
                        output = module(inputs)
                self._isend(self._pack((frame, version, float(last)), output), downstream)
                in_flight[frame] = entry
                if last and frame + 1 < self.shape.num_frames:
                    self._truncate(position, frame + 1)
            elif kind == "B":
                numel = _HEADER + (out_numel if config.train_vision else 0)
                message = self._recv(numel, downstream)
                began, cpu = self._now_ms(), time.thread_time()
                entry = in_flight[frame]
                delta = version - entry["version"]
                staleness[frame] = delta
                if config.train_vision:
                    gradient = message[_HEADER:].view(self.out_shapes[stage])
                    inputs = entry["inputs"]
                    if config.stash_weights:
                        torch.autograd.backward(entry["output"], gradient)
                        for name, param in params.items():
                            param.grad = entry["snapshot"][name].grad
                    else:
                        if stage > 0:
                            inputs.requires_grad_(True)
                        torch.autograd.backward(module(inputs), gradient)
                    scale = config.gradient_scale(delta)
                    if scale != 1.0:
                        for param in params.values():
                            if param.grad is not None:
                                param.grad.mul_(scale)
                    upstream = inputs.grad if stage > 0 else None
                else:
                    upstream = torch.empty(0) if stage > 0 else None
                if upstream is not None:
                    self._isend(self._pack((frame, entry["version"], 0.0), upstream), stage - 1)
            else:  # U
                if optimizer is not None:
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                version += 1
                del in_flight[frame]
            self.records.append((self.rank, kind, stage, frame, began, self._now_ms(),
                                 (time.thread_time() - cpu) * 1e3))
            position += 1
        return [staleness[j] for j in sorted(staleness)]

    def _evaluate_vision(self) -> None:
        import torch

        stage = self.rank
        images, _fast, _target = self.task.held_out(self.config.eval_samples)
        with torch.no_grad():
            value = images if stage == 0 else self._recv(
                self.config.eval_samples * math.prod(self.out_shapes[stage - 1][1:]), stage - 1
            ).view(self.config.eval_samples, *self.out_shapes[stage - 1][1:])
            output = self.stages[stage](value)
        self._isend(output.reshape(-1), stage + 1)
        self._finish_sends()

    # -------------------------------------------------------------- action
    def _action(self) -> tuple[int, int, float, list[tuple[float, int, float]]]:
        import torch

        config = self.config
        head = self.head
        optimizer = self.optimizer
        latent_shape = self.out_shapes[-1]
        latent_numel = math.prod(latent_shape)
        source = self.vision_ranks - 1
        pending: dict[int, tuple[Any, Any]] = {0: self._irecv(_HEADER + latent_numel, source)}
        ahead = self.shape.buffer_frames is not None and self.shape.buffer_frames >= 2
        curve: list[tuple[float, int, float]] = []
        latent: Any = None
        latent_version, last = 0.0, False
        loss: Any = None
        steps = frames = 0
        position = 0
        while position < self.shape.order_length(self.rank):
            kind, _stage, step = self.shape.action_at(self.rank, position)
            frame = step // config.rate_ratio
            first, last_of_window = step % config.rate_ratio == 0, step % config.rate_ratio == config.rate_ratio - 1
            began, cpu = self._now_ms(), time.thread_time()
            if kind == "F":
                if first:
                    work, message = pending.pop(frame)
                    work.wait()
                    began, cpu = self._now_ms(), time.thread_time()
                    latent_version, last = float(message[1]), bool(message[2] > 0.5)
                    latent = message[_HEADER:].view(latent_shape).clone().requires_grad_(config.train_vision)
                    frames += 1
                    if last:
                        if frame + 1 < self.shape.num_frames:
                            self._truncate(position, frame + 1)
                    elif ahead:
                        pending[frame + 1] = self._irecv(_HEADER + latent_numel, source)
                fast, target = self.task.step(step)
                loss = _mse(head(torch.cat([latent, fast], dim=1)), target)
            elif kind == "B":
                loss.backward()
                if last_of_window:
                    gradient = latent.grad if config.train_vision else torch.empty(0)
                    self._isend(self._pack((frame, latent_version, 0.0), gradient), source)
                    if not ahead and not last:
                        pending[frame + 1] = self._irecv(_HEADER + latent_numel, source)
            else:  # U
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                steps += 1
                curve.append((self._now_ms() / 1e3, steps * config.num_envs, float(loss.detach())))
            self.records.append((self.rank, kind, self.rank, step, began, self._now_ms(),
                                 (time.thread_time() - cpu) * 1e3))
            position += 1
        return steps, frames, self._now_ms() / 1e3, curve

    def _evaluate_action(self) -> float:
        import torch

        count = self.config.eval_samples
        _images, fast, target = self.task.held_out(count)
        latent = self._recv(count * math.prod(self.out_shapes[-1][1:]), self.vision_ranks - 1)
        with torch.no_grad():
            return float(_mse(self.head(torch.cat([latent.view(count, -1), fast], dim=1)), target))


# --------------------------------------------------------------- synchronous
def _synchronous_rank(rank: int, config: DualRateConfig) -> DualRateRun | None:
    """The baseline: both sides every step, exact gradients (PipelineRuntime, 1F1B over 2 stages)."""
    import torch
    import torch.distributed as dist

    from .policy import synchronous_model
    from ..schedules import build_schedule
    from ..runtime.executor import PipelineRuntime

    task, head, stages, encoder = _build(config)
    model = synchronous_model(encoder, head)
    schedule = build_schedule("1f1b", num_stages=2, num_microbatches=config.sync_microbatches)
    runtime = PipelineRuntime([model[0], model[1]], schedule, _mse)
    params = list(model[rank].parameters())
    optimizer = _optimizer(params, config)
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
    latent = torch.zeros(config.eval_samples, head[0].in_features - fast.shape[1])
    with torch.no_grad():
        if rank == 0:
            latent = encoder(images)
            dist.send(latent, 1)
        else:
            dist.recv(latent, 0)
        final = float(_mse(head(torch.cat([latent, fast], dim=1)), target))
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


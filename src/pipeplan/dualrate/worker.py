"""One rank of a dual-rate run: walks its order of the shape on the pipeline runtime's wire (torch).

    transport = LinkTransport(rank, link_groups(links, connect=True), list(range(world_size)))
    run = DualRateRank(rank, config, transport).run()    # in every process (pipeplan.runtime.spawn)
    run                                                  # the DualRateRun on the action rank, None elsewhere

What travels, and when, is described in :mod:`pipeplan.dualrate.runtime`. A rank
walks its order of the :class:`~pipeplan.schedules.dual_rate.DualRateShape` and
runs each action with the handler of its kind (``F``, ``B``, ``U``), one method
each for the vision ranks and for the action rank, as the pipeline executor runs
one method per kind, each inside the fault monitor's
:meth:`~pipeplan.runtime.faults.FaultMonitor.action` (the launcher names a rank
that fails, dies or hangs, and its action; its peers stop).

The messages are the pipeline runtime's packets (:mod:`pipeplan.runtime.p2p`):
``act(s, j)``, vision stage ``s``'s output for frame ``j``, is a tuple of the output
and an int64 tag ``(frame, weight version, last)``, preceded on its link by the
runtime's ``hdr`` (dtypes and shapes) before the first one; ``grad(s + 1, j)`` is
the gradient of that output (an empty tensor, an acknowledgement, when the encoder
is frozen). The held-out pass after the last frame is one more ``act(s, J)``, a
new batch with its own header.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..runtime.faults import FaultMonitor
from ..runtime.p2p import LinkTransport, Packet, TensorSpec, encode_header
from ..schedule import Action
from .config import DualRateConfig
from .result import DualRateRun
from .training import build_parts, make_optimizer, mse

__all__ = ["DualRateRank"]


@dataclass
class _VisionState:
    """What a vision rank carries from action to action.

    Attributes:
        params: the stage's parameters by name.
        version: updates applied so far (the weight version a forward is tagged with).
        in_flight: per frame whose update has not run, its forward's inputs, version
            and (stashing) weight snapshot and output.
        staleness: per frame, the Δt of its gradient.
        gradient: the spec of the gradient a ``B`` receives (known after the first forward).
    """

    params: dict[str, Any]
    version: int = 0
    gradient: list[TensorSpec] = field(default_factory=list)
    in_flight: dict[int, dict[str, Any]] = field(default_factory=dict)
    staleness: dict[int, int] = field(default_factory=dict)


@dataclass
class _ActionState:
    """What the action rank carries from action to action.

    Attributes:
        pending: posted latent receives by frame.
        ahead: whether the next frame's latent is received while this one's steps run
            (two or more buffer slots).
        latent, last: the current frame's latent (a leaf that collects its gradient) and
            whether it is the last frame.
        loss: the current step's loss.
        steps, frames, curve: updates done, frames taken, ``(s, samples, loss)`` per update.
    """

    pending: dict[int, Any]
    ahead: bool
    latent: Any = None
    last: bool = False
    loss: Any = None
    steps: int = 0
    frames: int = 0
    curve: list[tuple[float, int, float]] = field(default_factory=list)


class DualRateRank:
    """One rank of a dual-rate run: walks its order of the shape, sends and receives."""

    def __init__(self, rank: int, config: DualRateConfig, transport: LinkTransport) -> None:
        import torch

        self.rank = rank
        self.config = config
        self.transport = transport
        self.monitor = FaultMonitor.ensure(rank)
        self.device = torch.device("cpu")
        self.vision_ranks = config.num_vision_stages
        self.action_rank = self.vision_ranks
        self.task, self.head, self.stages, _encoder = build_parts(config)
        self.headed: set[int] = set()  # the links (by receiver) this rank has sent an act header on
        self.specs: dict[int, list[TensorSpec]] = {}  # per sender, its act packet's tensors (from the header)
        from torch.func import functional_call  # imported before the clock starts: the first import takes seconds

        self.functional_call = functional_call
        # Optimizers before the clock starts too (the first one imports much of torch).
        if rank == self.action_rank:
            self.optimizer = make_optimizer(list(self.head.parameters()), config)
        elif config.train_vision:
            self.optimizer = make_optimizer(list(self.stages[rank].parameters()), config)
        else:
            self.optimizer = None
            for param in self.stages[rank].parameters():
                param.requires_grad_(False)
        self.records: list[tuple[int, str, int, int, float, float, float]] = []
        self.shape = config.shape()
        self.began = self.cpu = 0.0  # the clocks of the current action (see _begin)

    # ----------------------------------------------------------- messaging
    def _send_act(self, dst: int, tensors: list[Any], *, new_batch: bool = False) -> None:
        """Send an ``act`` packet to ``dst``, its header first on the link's first one (or a new batch)."""
        header = None
        if new_batch or dst not in self.headed:
            self.headed.add(dst)
            header = encode_header(tensors, self.device, is_tuple=len(tensors) > 1)
        self.transport.send(dst, tensors, header=header)
        self.transport.prune()

    def _send_grad(self, dst: int, gradient: Any) -> None:
        """Send a ``grad`` packet (the gradient of the output ``dst`` sent, or an empty acknowledgement)."""
        self.transport.send(dst, [gradient])
        self.transport.prune()

    def _post_act(self, src: int, frame: int, *, new_batch: bool = False) -> Any:
        """Post the receive of ``act(src, frame)``; on the link's first (or a new batch) wait for its header first."""
        if new_batch or src not in self.specs:
            self.specs[src] = self.transport.receive_header(src, Packet("hdr", src, frame), self.device,
                                                            self.config.num_envs)[0]
        return self.transport.post(src, self.specs[src], self.device)

    def _receive_act(self, src: int, frame: int, *, new_batch: bool = False) -> tuple[Any, bool]:
        """``act(src, frame)``: the output and whether its frame is the last one."""
        tensors = self.transport.wait(src, Packet("act", src, frame), self._post_act(src, frame, new_batch=new_batch))
        return tensors[0], len(tensors) > 1 and bool(tensors[1][2] > 0)

    def _tag(self, frame: int, version: int, last: bool) -> Any:
        import torch

        return torch.tensor([frame, version, int(last)], dtype=torch.int64)

    def run(self) -> DualRateRun | None:
        """Walk this rank's order, evaluate, gather every rank's records; the run on the action rank, else ``None``."""
        import torch.distributed as dist

        with self.monitor.phase_of("the run's barrier", collective=True):
            dist.barrier()
        self.t0 = time.perf_counter()
        if self.rank < self.vision_ranks:
            staleness = self._vision()
            with self.monitor.phase_of("the held-out pass"):
                self.transport.finish()
                self._evaluate_vision()
            payload: Any = (self.records, staleness, self._weights())
        else:
            summary = self._action()
            with self.monitor.phase_of("the held-out pass"):
                self.transport.finish()
                final = self._evaluate_action()
            payload = (self.records, None, self._weights())
        gathered: list[Any] = [None] * (self.vision_ranks + 1)
        with self.monitor.phase_of("gathering the records", collective=True):
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

    def _begin(self) -> None:
        """Start the clocks of an action (again after its message arrived: waiting is not counted)."""
        self.began, self.cpu = self._now_ms(), time.thread_time()

    def _record(self, kind: str, stage: int, index: int) -> None:
        """Record the action begun at :meth:`_begin`: wall-clock start and end (ms), thread CPU ms."""
        self.records.append((self.rank, kind, stage, index, self.began, self._now_ms(),
                             (time.thread_time() - self.cpu) * 1e3))

    def _truncate(self, position: int, frames: int) -> None:
        """Switch to the order for ``frames`` frames; the part already run is a prefix of it."""
        shorter = self.shape.with_frames(frames)
        if shorter.action_at(self.rank, position) != self.shape.action_at(self.rank, position):  # pragma: no cover
            raise AssertionError(f"rank {self.rank}: the order for {frames} frames does not extend the run so far")
        self.shape = shorter

    def _walk(self, handlers: dict[str, Callable[[Any, int, int], None]], state: Any) -> None:
        """Run this rank's order: each action by the handler of its kind, ``handler(state, index, position)``, timed.

        Each runs inside the fault monitor's action, so a failure names it and stops the peers.
        """
        position = 0
        while position < self.shape.order_length(self.rank):
            kind, _stage, index = self.shape.action_at(self.rank, position)
            with self.monitor.action(Action(kind, self.rank, index)):
                self._begin()
                handlers[kind](state, index, position)
                self._record(kind, self.rank, index)
            position += 1

    # -------------------------------------------------------------- vision
    def _vision(self) -> list[int]:
        """Walk a vision rank's order; return the staleness Δt of every frame's gradient, by frame."""
        state = _VisionState(dict(self.stages[self.rank].named_parameters()))
        self._walk({"F": self._vision_forward, "B": self._vision_backward, "U": self._vision_update}, state)
        return [state.staleness[j] for j in sorted(state.staleness)]

    def _vision_input(self, frame: int) -> tuple[Any, bool]:
        """Frame ``frame``'s input of this stage and whether it is the last frame (stage 0 decides)."""
        config = self.config
        stage = self.rank
        if stage == 0:
            inputs = self.task.frame(frame * config.rate_ratio // config.camera_period)
            last = frame == config.max_frames - 1 or (
                config.time_budget is not None and self.began / 1e3 >= config.time_budget
            )
            return inputs, last
        inputs, last = self._receive_act(stage - 1, frame)
        self._begin()
        return inputs, last

    def _vision_forward(self, state: _VisionState, frame: int, position: int) -> None:
        """``F``: run the stage (on a snapshot of its weights when stashing) and send the output on."""
        import torch

        config = self.config
        stage = self.rank
        module = self.stages[stage]
        inputs, last = self._vision_input(frame)
        entry: dict[str, Any] = {"inputs": inputs, "version": state.version}
        if config.train_vision and config.stash_weights:
            snapshot = {n: p.detach().clone().requires_grad_(True) for n, p in state.params.items()}
            if stage > 0:
                inputs.requires_grad_(True)
            output = self.functional_call(module, snapshot, (inputs,))
            entry.update(snapshot=snapshot, output=output)
        else:
            with torch.no_grad():
                output = module(inputs)
        if not state.gradient:
            state.gradient = [TensorSpec(tuple(output.shape) if config.train_vision else (0,), output.dtype, False)]
        self._send_act(stage + 1, [output.detach(), self._tag(frame, state.version, last)])
        state.in_flight[frame] = entry
        if last and frame + 1 < self.shape.num_frames:
            self._truncate(position, frame + 1)

    def _vision_backward(self, state: _VisionState, frame: int, position: int) -> None:
        """``B``: receive the output's gradient, backpropagate it, send the input's gradient upstream."""
        import torch

        config = self.config
        stage = self.rank
        pending = self.transport.post(stage + 1, state.gradient, self.device)
        gradient = self.transport.wait(stage + 1, Packet("grad", stage + 1, frame), pending)[0]
        self._begin()
        entry = state.in_flight[frame]
        delta = state.version - entry["version"]
        state.staleness[frame] = delta
        if config.train_vision:
            upstream = self._stale_gradient(state, entry, gradient, delta)
        else:
            upstream = torch.empty(0) if stage > 0 else None
        if upstream is not None:
            self._send_grad(stage - 1, upstream)

    def _stale_gradient(self, state: _VisionState, entry: dict[str, Any], gradient: Any, delta: int) -> Any:
        """Backpropagate ``gradient`` through the forward of ``entry`` into ``.grad``, scaled for staleness ``delta``.

        Returns:
            The gradient of the stage's input (``None`` on stage 0).
        """
        import torch

        config = self.config
        stage = self.rank
        inputs = entry["inputs"]
        if config.stash_weights:
            torch.autograd.backward(entry["output"], gradient)
            for name, param in state.params.items():
                param.grad = entry["snapshot"][name].grad
        else:
            if stage > 0:
                inputs.requires_grad_(True)
            torch.autograd.backward(self.stages[stage](inputs), gradient)
        scale = config.gradient_scale(delta)
        if scale != 1.0:
            for param in state.params.values():
                if param.grad is not None:
                    param.grad.mul_(scale)
        return inputs.grad if stage > 0 else None

    def _vision_update(self, state: _VisionState, frame: int, position: int) -> None:
        """``U``: the optimizer step (none for a frozen encoder); the frame's forward is released."""
        if self.optimizer is not None:
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
        state.version += 1
        del state.in_flight[frame]

    def _evaluate_vision(self) -> None:
        """Pass the held-out images through this stage with the final weights, on to the next rank."""
        import torch

        stage = self.rank
        images, _fast, _target = self.task.held_out(self.config.eval_samples)
        with torch.no_grad():
            value = images if stage == 0 else self._receive_act(stage - 1, self.shape.num_frames, new_batch=True)[0]
            output = self.stages[stage](value)
        self._send_act(stage + 1, [output], new_batch=True)
        self.transport.finish()

    # -------------------------------------------------------------- action
    def _action(self) -> tuple[int, int, float, list[tuple[float, int, float]]]:
        """Walk the action rank's order; return ``(steps, frames, seconds, curve)``."""
        state = _ActionState({0: self._post_act(self.vision_ranks - 1, 0)},
                             ahead=self.shape.buffer_frames is not None and self.shape.buffer_frames >= 2)
        self._walk({"F": self._action_forward, "B": self._action_backward, "U": self._action_update}, state)
        return state.steps, state.frames, self._now_ms() / 1e3, state.curve

    def _action_forward(self, state: _ActionState, step: int, position: int) -> None:
        """``F``: the head on the frame's latent (taken at the frame's first step) and the step's fast input."""
        import torch

        if step % self.config.rate_ratio == 0:
            self._take_latent(state, step // self.config.rate_ratio, position)
        fast, target = self.task.step(step)
        state.loss = mse(self.head(torch.cat([state.latent, fast], dim=1)), target)

    def _take_latent(self, state: _ActionState, frame: int, position: int) -> None:
        """Wait for frame ``frame``'s latent; post the next receive ahead, or end the order at the last frame."""
        src = self.vision_ranks - 1
        latent, tag = self.transport.wait(src, Packet("act", src, frame), state.pending.pop(frame))
        self._begin()
        state.last = bool(tag[2] > 0)
        state.latent = latent.requires_grad_(self.config.train_vision)
        state.frames += 1
        if state.last:
            if frame + 1 < self.shape.num_frames:
                self._truncate(position, frame + 1)
        elif state.ahead:
            state.pending[frame + 1] = self._post_act(src, frame + 1)

    def _action_backward(self, state: _ActionState, step: int, position: int) -> None:
        """``B``: backpropagate the step's loss; after the window's last step send the latent's gradient back."""
        import torch

        config = self.config
        state.loss.backward()
        if step % config.rate_ratio != config.rate_ratio - 1:
            return
        frame = step // config.rate_ratio
        gradient = state.latent.grad if config.train_vision else torch.empty(0)
        self._send_grad(self.vision_ranks - 1, gradient)
        if not state.ahead and not state.last:
            state.pending[frame + 1] = self._post_act(self.vision_ranks - 1, frame + 1)

    def _action_update(self, state: _ActionState, step: int, position: int) -> None:
        """``U``: the head's optimizer step; one point of the training curve."""
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        state.steps += 1
        state.curve.append((self._now_ms() / 1e3, state.steps * self.config.num_envs, float(state.loss.detach())))

    def _evaluate_action(self) -> float:
        """The held-out loss of the final weights (the latents come from the last vision rank)."""
        import torch

        count = self.config.eval_samples
        _images, fast, target = self.task.held_out(count)
        latent = self._receive_act(self.vision_ranks - 1, self.shape.num_frames, new_batch=True)[0]
        with torch.no_grad():
            return float(mse(self.head(torch.cat([latent.view(count, -1), fast], dim=1)), target))

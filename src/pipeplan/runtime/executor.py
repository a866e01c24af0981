"""Run one rank's part of any pipeplan :class:`~pipeplan.schedule.Schedule` on real tensors.

    runtime = PipelineRuntime(stages, build_schedule("1f1b", num_stages=2, num_microbatches=4), loss_fn)
    result = runtime.step(inputs, targets)       # every rank calls it with the same batch
    result.loss, result.timeline                 # timeline on the pipeline's rank 0

One :meth:`PipelineRuntime.step` is one training step without the optimizer: the
batch is cut with ``tensor_split`` into the schedule's microbatches (an uneven
last one is fine), every action of this rank's order runs in order, and the
gradients accumulate into ``.grad`` exactly as ``loss_fn(model(inputs),
targets).backward()`` would on one process, given that ``loss_fn`` returns the
*mean* over the batch (each microbatch's loss is weighted by its share of the
batch). With a data-parallel group the gradients and the loss are averaged over
the replicas, so the result is the single-process step on their concatenated
batches (equal shard sizes).

:meth:`PipelineRuntime.step_microbatches` takes the microbatches one by one
instead, each of its own shape (1 to 4 cameras, prompts of different lengths):
every activation goes after a header with its own shapes, and the gradients are
those of the per-microbatch losses, each weighted by its share of the samples::

    result = runtime.step_microbatches([images_1cam, images_4cam], [targets_a, targets_b])

Split backward (``I`` and ``W`` actions): ``I`` computes the gradient of
the stage's input on the retained graph and keeps the gradients at the nodes
where the parameters' paths meet the input's; ``W`` resumes from those nodes for
the parameters only (:mod:`pipeplan.runtime.split`), so the gradients are exact
and no part of the backward runs twice.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from .._validation import positive_int
from ..errors import InvalidInputError
from ..schedule import Action, Kind, Schedule
from .checks import check_local, check_world, fingerprint
from .faults import FaultMonitor
from .grid import link_groups
from .microbatches import _check_microbatches, _flatten, _signature, _split_batch
from .p2p import LinkExchange, MessagePlan
from .recorder import StepRecorder, assemble_timeline
from .split import SplitBackward
from .step_result import StepResult

__all__ = ["PipelineRuntime", "StepResult"]


class _Bounded(dict[Any, Any]):
    """A dict that forgets its oldest entries beyond ``limit`` (caches keyed by a batch's shapes)."""

    def __init__(self, limit: int) -> None:
        super().__init__()
        self.limit = limit

    def __setitem__(self, key: Any, value: Any) -> None:
        super().__setitem__(key, value)
        while len(self) > self.limit:
            del self[next(iter(self))]


_CACHED_SIGNATURES = 64
"""Batch signatures whose headers, saved bytes and probes a runtime keeps (mixed shapes make many)."""


class _SavedBytes:
    """A ``saved_tensors_hooks`` pair counting the bytes autograd keeps (parameters excluded)."""

    def __init__(self, excluded: set[int]) -> None:
        self.excluded = excluded
        self.seen: set[int] = set()
        self.total = 0

    def pack(self, tensor: Any) -> Any:
        storage = tensor.untyped_storage()
        pointer = storage.data_ptr()
        if pointer not in self.seen and pointer not in self.excluded:
            self.seen.add(pointer)
            self.total += storage.nbytes()
        return tensor

    @staticmethod
    def unpack(tensor: Any) -> Any:
        return tensor


class _Forward:
    """What a forward leaves for its backward (and W)."""

    __slots__ = ("inputs", "outputs", "split")

    def __init__(self, inputs: list[Any], outputs: list[Any]) -> None:
        self.inputs = inputs
        self.outputs = outputs
        self.split: SplitBackward | None = None


class PipelineRuntime:
    """Executes a :class:`~pipeplan.schedule.Schedule` on this process's stages.

    Every rank of the world constructs its runtime at the same time (the
    constructor checks, collectively, that all ranks agree on the schedule and
    creates the link groups). The process group must be initialised first
    (:func:`pipeplan.runtime.spawn`, or torchrun with
    :func:`pipeplan.runtime.init_from_env`).

    Args:
        stages: one ``nn.Module`` per stage of the schedule (entries of stages
            on other ranks may be ``None``), or ``(nn.Sequential,
            layers_per_stage)``. A stage receives what the previous one returned
            (a tensor or a tuple of tensors) as its one argument; stage 0
            receives the microbatch of ``inputs``.
        schedule: any valid pipeplan schedule with a backward (full or split),
            any placement; ``schedule.num_ranks`` must equal the pipeline group's size.
        loss_fn: ``loss_fn(last_stage_output, targets) -> scalar``, a mean over the batch.
        checkpoint: recompute activations in the backward
            (``torch.utils.checkpoint``, non-reentrant): one bool, or one per stage.
        pp_group: the pipeline's process group (``None``: the whole world).
        dp_group: the data-parallel group of this rank's replicas (``None``: no dp).
        device: where this rank computes (default ``cuda:LOCAL_RANK`` on NCCL, else CPU).
        window: receives posted ahead of need per link, >= 1.

    Raises:
        InvalidInputError: the world, schedule or partition do not match; names
            the rank and what differs. Raised on every rank, before any step.
    """

    def __init__(
        self,
        stages: Sequence[Any] | tuple[Any, Sequence[int]],
        schedule: Schedule,
        loss_fn: Callable[[Any, Any], Any],
        *,
        checkpoint: bool | Sequence[bool] = False,
        pp_group: Any = None,
        dp_group: Any = None,
        device: Any = None,
        window: int = 2,
    ) -> None:
        import torch
        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise InvalidInputError(
                "torch.distributed must be initialised before building a PipelineRuntime "
                "(use pipeplan.runtime.spawn, or torchrun and pipeplan.runtime.init_from_env)"
            )
        if not isinstance(schedule, Schedule):
            raise InvalidInputError(f"schedule must be a pipeplan Schedule, got {type(schedule).__name__}")
        self.schedule = schedule
        self.loss_fn = loss_fn
        self.window = positive_int("window", window)
        self.pp_group = pp_group
        self.dp_group = dp_group
        self.global_rank = dist.get_rank()
        self.rank = dist.get_rank(pp_group) if pp_group is not None else self.global_rank
        self.to_global = (
            list(dist.get_process_group_ranks(pp_group)) if pp_group is not None
            else list(range(dist.get_world_size()))
        )
        self.monitor = FaultMonitor.ensure(self.global_rank)
        backend = dist.get_backend(pp_group)
        if device is None:
            device = (
                torch.device("cuda", torch.cuda.current_device()) if backend == "nccl" else torch.device("cpu")
            )
        self.device = torch.device(device)

        problem, modules = check_local(schedule, stages, checkpoint, rank=self.rank, group_size=len(self.to_global),
                                       device=self.device)
        plan = MessagePlan(schedule, self.rank) if problem is None else None
        links = sorted(plan.links()) if plan is not None else []
        gathered: list[Any] = [None] * dist.get_world_size()
        with self.monitor.phase_of("setup", collective=True):
            dist.all_gather_object(gathered, (tuple(self.to_global), fingerprint(schedule), links, problem))
        check_world(schedule, gathered)  # raises on every rank if any rank found a problem
        assert plan is not None
        global_links = {
            (ranks[src], ranks[dst])
            for ranks, _fp, group_links, _problem in gathered
            for src, dst in group_links
        }
        with self.monitor.phase_of("setup", collective=True):
            every_group = link_groups(global_links, device=self.device)
        self.groups = {
            (src, dst): every_group[(self.to_global[src], self.to_global[dst])] for src, dst in plan.links()
        }
        self.plan = plan
        self.modules = modules
        self.local_stages = schedule.stages_of(self.rank)
        self.checkpointed = self._checkpoint_flags(checkpoint)
        self._params = list(dict.fromkeys(p for s in self.local_stages for p in modules[s].parameters()))
        self._stage_params = {s: list(modules[s].parameters()) for s in self.local_stages}
        self._probe_cache: dict[tuple[int, Any], float] = _Bounded(_CACHED_SIGNATURES * len(self.local_stages))
        self._known_headers: dict[Any, Any] = _Bounded(_CACHED_SIGNATURES)
        self._saved_bytes: dict[tuple[int, Any], float] = _Bounded(_CACHED_SIGNATURES * len(self.local_stages))

    def _checkpoint_flags(self, checkpoint: bool | Sequence[bool]) -> dict[int, bool]:
        if isinstance(checkpoint, bool):
            return {s: checkpoint for s in self.local_stages}
        flags = list(checkpoint)
        return {s: bool(flags[s]) for s in self.local_stages}

    # ------------------------------------------------------------------ step
    def step(self, inputs: Any, targets: Any) -> StepResult:
        """Run one training step (forward, backward, gradient accumulation; no optimizer).

        Args:
            inputs: the batch for stage 0 (a tensor or a tuple of tensors, batch on dim 0),
                cut into the schedule's microbatches with ``tensor_split``.
            targets: what ``loss_fn`` compares the last stage's output with.

        Returns:
            A :class:`StepResult`.

        Raises:
            InvalidInputError: a batch smaller than the number of microbatches.
            RuntimeFailure: an action raised on this rank (the message names the
                rank and the action); a peer's failure stops this process instead.
        """
        num_mb = self.schedule.num_microbatches
        mb_inputs, sizes = _split_batch(inputs, num_mb, "inputs")
        mb_targets, target_sizes = _split_batch(targets, num_mb, "targets")
        if target_sizes != sizes:
            raise InvalidInputError(f"targets split into {target_sizes}, but inputs into {sizes}")
        return self._step(mb_inputs, mb_targets, sizes)

    def step_microbatches(self, inputs: Sequence[Any], targets: Sequence[Any]) -> StepResult:
        """One training step on microbatches given one by one, each of its own shape.

        ``inputs[i]`` is microbatch ``i`` for stage 0 (a tensor or a tuple of
        tensors, samples on dim 0) and ``targets[i]`` its targets; microbatches may
        differ in samples and in every other dimension (1 to 4 cameras, prompts of
        different lengths), and so may the messages between stages: every
        activation travels after a header with its own shapes. The gradients are
        those of ``sum_i loss_fn(model(inputs[i]), targets[i]) * n_i / N`` on one
        process (``n_i`` samples in microbatch ``i``, ``N`` in all): the mean over
        the batch's samples when ``loss_fn`` is a mean over a microbatch's. Every
        rank passes the same microbatches (or at least ones of the same shapes).

        Raises:
            InvalidInputError: not one entry per microbatch, or a microbatch whose
                inputs and targets do not share dimension 0.
            RuntimeFailure: an action raised on this rank, e.g. a stage that cannot
                take a microbatch's shape: ``"rank 1 failed in F(stage 1, mb 2): ..."``.
        """
        sizes = _check_microbatches(inputs, targets, self.schedule.num_microbatches)
        return self._step(list(inputs), list(targets), sizes)

    def _step(self, mb_inputs: list[Any], mb_targets: list[Any], sizes: list[int]) -> StepResult:
        """One step on microbatches already cut (``sizes``: samples per microbatch)."""
        import torch.distributed as dist

        schedule = self.schedule
        batch = float(sum(sizes))
        signature = _signature(mb_inputs, sizes)
        known = self._known_headers.get(signature)
        exchange = LinkExchange(self.plan, self.groups, self.to_global, sizes, self.device, window=self.window,
                                known_headers=known)
        recorder = StepRecorder(schedule, self.rank)
        state = _StepState(mb_inputs, mb_targets, sizes, batch, signature)
        excluded = {p.untyped_storage().data_ptr() for p in self._params}
        with self.monitor.phase_of("the step's barrier", collective=True):
            dist.barrier(group=self.pp_group)
        recorder.begin()
        for index, action in enumerate(schedule.orders[self.rank]):
            exchange.post_ahead()
            with self.monitor.action(action):
                self._run(action, index, state, exchange, recorder, excluded)
        with self.monitor.phase_of("waiting for the step's sends", collective=True):
            exchange.finish()
        if known is None:
            self._known_headers[signature] = (exchange.headers, exchange.tuple_flags)
        probe = self._probe(state, excluded)
        loss, rows, stage_bytes = self._gather(recorder, state)
        with self.monitor.phase_of("the data-parallel all-reduce", collective=True):
            loss = self._all_reduce(loss)
        step_time = recorder.now()
        timeline = None
        if self.rank == 0:
            timeline = assemble_timeline(schedule, rows, activation_bytes=stage_bytes)
        durations = recorder.end - recorder.start
        result = StepResult(loss=loss, timeline=timeline, rank=self.rank, step_time=step_time)
        for stage in self.local_stages:
            for kinds, target in (((Kind.F,), result.forward_time), ((Kind.B, Kind.I), result.backward_time),
                                  ((Kind.W,), result.weight_time)):
                target[stage] = float(sum(d for d, a in zip(durations, schedule.orders[self.rank])
                                          if a.kind in kinds and a.stage == stage))
            result.saved_activation_bytes[stage] = self._saved_bytes.get((stage, state.signature), 0.0)
            result.checkpoint[stage] = self.checkpointed[stage]
            if self.checkpointed[stage]:
                result.saved_activation_bytes_without_checkpoint[stage] = probe[stage]
                result.recompute_time[stage] = result.forward_time[stage]
            else:
                result.saved_activation_bytes_without_checkpoint[stage] = result.saved_activation_bytes[stage]
        return result

    # --------------------------------------------------------------- actions
    def _run(self, action: Action, index: int, state: _StepState, exchange: LinkExchange,
             recorder: StepRecorder, excluded: set[int]) -> None:
        kind = action.kind
        if kind is Kind.F:
            value = self._forward_input(action, state, exchange)
            recorder.started(index)
            self._forward(action, value, state, excluded)
            self._synchronize()
            recorder.ended(index)
            self._forward_send(action, state, exchange)
        elif kind is Kind.B or kind is Kind.I:
            grads = self._backward_input(action, state, exchange)
            recorder.started(index)
            inputs, input_grads = self._backward(action, grads, state)
            self._synchronize()
            recorder.ended(index)
            self._backward_send(action, inputs, input_grads, state, exchange)
        else:
            recorder.started(index)
            self._weight(action, state)
            self._synchronize()
            recorder.ended(index)

    def _synchronize(self) -> None:
        if self.device.type == "cuda":
            import torch

            torch.cuda.synchronize(self.device)

    def _to_device(self, value: Any) -> Any:
        if isinstance(value, tuple):
            return tuple(v.to(self.device, non_blocking=True) for v in value)
        return value.to(self.device, non_blocking=True)

    def _forward_input(self, action: Action, state: _StepState, exchange: LinkExchange) -> Any:
        _kind, stage, mb = action
        if stage == 0:
            return self._to_device(state.inputs[mb])
        need = self.plan.needs.get(action)
        if need is None:
            return state.local_acts.pop((stage - 1, mb))
        src, message = need
        tensors = exchange.receive(src, message)
        tensors = [t.requires_grad_(True) if t.dtype.is_floating_point else t for t in tensors]
        return tuple(tensors) if exchange.is_tuple(src, stage - 1, mb) else tensors[0]

    def _forward(self, action: Action, value: Any, state: _StepState, excluded: set[int]) -> None:
        import torch
        from torch.utils.checkpoint import checkpoint

        _kind, stage, mb = action
        module = self.modules[stage]
        inputs, _ = _flatten(value, f"the input of stage {stage}")
        counter = _SavedBytes(excluded)
        bytes_key = (stage, state.signature)
        measure = bytes_key not in self._saved_bytes  # the first forward of this stage and batch shape
        with contextlib.ExitStack() as stack:
            if measure:
                stack.enter_context(torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack))
            if self.checkpointed[stage]:
                output = checkpoint(module, value, use_reentrant=False)
            else:
                output = module(value)
        if measure:
            saved = counter.total
            if self.checkpointed[stage]:
                saved += sum(t.untyped_storage().nbytes() for t in inputs
                             if t.untyped_storage().data_ptr() not in counter.seen)
                state.probe_inputs[stage] = value
            self._saved_bytes[bytes_key] = float(saved)
        if stage == self.schedule.num_stages - 1:
            loss = self.loss_fn(output, self._to_device(state.targets[mb]))
            if not isinstance(loss, torch.Tensor) or loss.numel() != 1:
                raise InvalidInputError(f"loss_fn must return a scalar tensor, got {loss!r}")
            loss = loss.reshape(()) * (state.sizes[mb] / state.batch)
            state.loss_sum += loss.detach()
            outputs = [loss]
        else:
            outputs, is_tuple = _flatten(output, f"the output of stage {stage}")
            state.outgoing[(stage, mb)] = (outputs, is_tuple)
        grad_inputs = [t for t in inputs if t.requires_grad] if stage > 0 else []
        state.forwards[(stage, mb)] = _Forward(grad_inputs, outputs)

    def _forward_send(self, action: Action, state: _StepState, exchange: LinkExchange) -> None:
        _kind, stage, mb = action
        if stage == self.schedule.num_stages - 1:
            return
        outputs, is_tuple = state.outgoing.pop((stage, mb))
        detached = [t.detach() for t in outputs]
        produced = self.plan.produces.get(action)
        if produced is None:
            local = [t.requires_grad_(True) if t.dtype.is_floating_point else t for t in detached]
            state.local_acts[(stage, mb)] = tuple(local) if is_tuple else local[0]
        else:
            dst, message = produced
            exchange.send(dst, message, detached, is_tuple=is_tuple)

    def _backward_input(self, action: Action, state: _StepState, exchange: LinkExchange) -> list[Any] | None:
        _kind, stage, mb = action
        if stage == self.schedule.num_stages - 1:
            return None
        need = self.plan.needs.get(action)
        if need is None:
            return state.local_grads.pop((stage + 1, mb))
        src, message = need
        return exchange.receive(src, message)

    def _backward(self, action: Action, grads: list[Any] | None, state: _StepState) -> tuple[list[Any], list[Any]]:
        """Run ``B`` (both gradients) or ``I`` (the input's); return the stage's grad-requiring inputs and their gradients."""
        import torch

        _kind, stage, mb = action
        forward = state.forwards[(stage, mb)]
        if grads is None:
            roots, root_grads = forward.outputs, [None]
        else:
            floating = [t for t in forward.outputs if t.dtype.is_floating_point]
            pairs = [(t, g) for t, g in zip(floating, grads) if t.requires_grad]
            roots = [t for t, _g in pairs]
            root_grads = [g for _t, g in pairs]
        inputs = forward.inputs
        if not roots:
            input_grads: list[Any] = [None] * len(inputs)
        elif action.kind is Kind.B or self.checkpointed[stage]:
            # A checkpointed stage recomputes its forward once per backward call, so
            # splitting would recompute it again in W: its I computes both halves.
            torch.autograd.backward(roots, root_grads)
            input_grads = [t.grad for t in inputs]
            del state.forwards[(stage, mb)]
        else:
            forward.split = SplitBackward(roots, inputs, self._stage_params[stage])
            input_grads = forward.split.backward_input(root_grads)
        return inputs, input_grads

    def _backward_send(self, action: Action, forward_inputs: list[Any], input_grads: list[Any],
                       state: _StepState, exchange: LinkExchange) -> None:
        import torch

        _kind, stage, mb = action
        if stage == 0:
            return
        grads = [g if g is not None else torch.zeros_like(t) for t, g in zip(forward_inputs, input_grads)]
        produced = self.plan.produces.get(action)
        if produced is None:
            state.local_grads[(stage, mb)] = grads
        else:
            dst, message = produced
            exchange.send(dst, message, grads)

    def _weight(self, action: Action, state: _StepState) -> None:
        _kind, stage, mb = action
        forward = state.forwards.pop((stage, mb), None)  # None: I already did the weight half
        if forward is not None and forward.split is not None:
            forward.split.backward_weight()

    # ------------------------------------------------------------ reductions
    def _probe(self, state: _StepState, excluded: set[int]) -> dict[int, float]:
        """Saved bytes per microbatch without checkpointing, for checkpointed stages (cached)."""
        import torch

        out = {}
        for stage in self.local_stages:
            if not self.checkpointed[stage]:
                continue
            value = state.probe_inputs.get(stage)
            key = (stage, state.signature)
            if key not in self._probe_cache:
                with self.monitor.phase_of(f"the checkpointing probe of stage {stage}"):
                    counter = _SavedBytes(excluded)
                    probe_value = _detached_copy(value)
                    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(counter.pack, counter.unpack):
                        self.modules[stage](probe_value)  # the graph (and its saved tensors) is dropped at once
                    self._probe_cache[key] = float(counter.total)
            out[stage] = self._probe_cache[key]
        return out

    def _gather(self, recorder: StepRecorder, state: _StepState) -> tuple[float, list[np.ndarray], list[float]]:
        """All-gather timings, the loss and per-stage bytes over the pipeline group."""
        import torch
        import torch.distributed as dist

        schedule = self.schedule
        width = max(len(order) for order in schedule.orders)
        stage_bytes = np.zeros(schedule.num_stages)
        for stage in self.local_stages:
            stage_bytes[stage] = self._saved_bytes.get((stage, state.signature), 0.0)
        loss_value = float(state.loss_sum) if isinstance(state.loss_sum, torch.Tensor) else 0.0
        row = np.concatenate([recorder.row(width), [loss_value], stage_bytes])
        local = torch.tensor(row, dtype=torch.float64, device=self.device)
        rows = [torch.empty_like(local) for _ in range(schedule.num_ranks)]
        with self.monitor.phase_of("gathering the timeline", collective=True):
            dist.all_gather(rows, local, group=self.pp_group)
        host = [r.cpu().numpy() for r in rows]
        offset = 2 * width + 2
        loss = float(sum(h[offset] for h in host))
        bytes_per_stage = [float(sum(h[offset + 1 + s] for h in host)) for s in range(schedule.num_stages)]
        return loss, host, bytes_per_stage

    def _all_reduce(self, loss: float) -> float:
        """Average gradients and loss over the data-parallel group."""
        import torch
        import torch.distributed as dist

        if self.dp_group is None or dist.get_world_size(self.dp_group) == 1:
            return loss
        replicas = dist.get_world_size(self.dp_group)
        with_grad = [p for p in self._params if p.grad is not None]
        flat = torch.cat([p.grad.reshape(-1).to(torch.float64) for p in with_grad]
                         + [torch.tensor([loss], dtype=torch.float64, device=self.device)])
        dist.all_reduce(flat, group=self.dp_group)
        flat /= replicas
        offset = 0
        for param in with_grad:
            count = param.grad.numel()
            param.grad.copy_(flat[offset: offset + count].view_as(param.grad))
            offset += count
        return float(flat[-1])


class _StepState:
    """Per-step bookkeeping of one rank."""

    def __init__(self, inputs: list[Any], targets: list[Any], sizes: list[int], batch: float,
                 signature: tuple[Any, ...]) -> None:
        self.signature = signature
        self.inputs = inputs
        self.targets = targets
        self.sizes = sizes
        self.batch = batch
        self.loss_sum: Any = 0.0
        self.forwards: dict[tuple[int, int], _Forward] = {}
        self.outgoing: dict[tuple[int, int], tuple[list[Any], bool]] = {}
        self.local_acts: dict[tuple[int, int], Any] = {}
        self.local_grads: dict[tuple[int, int], list[Any]] = {}
        self.probe_inputs: dict[int, Any] = {}


def _detached_copy(value: Any) -> Any:
    if isinstance(value, tuple):
        return tuple(v.detach().requires_grad_(v.dtype.is_floating_point) for v in value)
    return value.detach().requires_grad_(value.dtype.is_floating_point)



"""When no plan fits: why, and what would, each remedy computed by planning with it.

    from pipeplan.planner import search
    from pipeplan.planner.advice import NoPlanFitsError
    try:
        search(workload, Cluster.of("h100-80g", 1), global_batch=8)
    except NoPlanFitsError as error:
        [remedy.line() for remedy in error.remedies]   # ['--gpus 2: 70.6 GiB per GPU, fits 71.7 GiB (...)']

Advice is never canned. For each remedy in reach of the command (more GPUs, a
fixed option dropped — ``--dp-modes``, ``--tp``, ``--pp``, ``--micro-batch-size``,
``--partition``, ``--schedules`` — ``--headroom 0``, the device's whole memory
instead of a smaller ``--memory``) the search runs again with it, and only the
remedies under which some plan fits are offered, each with that plan's worst GPU
against the capacity. When none fits, the error says so and what was tried.
Recompute needs no remedy: the search already tries every mode per stage.

Where the question itself limits the answer while plans still fit, a note says so
(:func:`batch_note`: a global batch that some data-parallel degrees do not divide,
with the nearest batches that every degree divides).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InfeasiblePlanError
from ..plan import Plan
from ..units import format_capacity, format_figures, format_gib
from .cluster import Cluster
from .memory import OptimizerBytes
from .records import Rejection
from .workload import Workload

__all__ = ["NoPlanFitsError", "Remedy", "no_plan_fits", "find_remedies", "capacity_text", "gpus_for_state",
           "batch_note", "baseline_notes"]

#: ``attempt(cluster, options)``: the best plan that fits under them (options: a
#: :class:`~pipeplan.planner.search.SearchOptions`), or ``None``.
Attempt = Callable[[Cluster, Any], "Plan | None"]

#: Most GPU counts tried, doubling from the command's (each is a search).
_GPU_TRIES = 3


@dataclass(frozen=True)
class Remedy:
    """A change to the command under which a plan fits.

    Attributes:
        flags: what to write instead, as command-line flags (``"--gpus 2"``,
            ``"without --pp"``, ``"--headroom 0"``).
        plan: the best plan the search found with it.
        capacity: the bytes per GPU a plan may use with it.
    """

    flags: str
    plan: Plan
    capacity: float

    @property
    def worst_bytes(self) -> float:
        """Bytes the plan's fullest GPU holds at its peak."""
        return max(self.plan.peak_memory)

    def line(self) -> str:
        """``--gpus 2: 70.6 GiB per GPU, fits 71.7 GiB (1×1×2 zero2, 1f1b, b×m 4×1, 166 ms a step)``."""
        plan = self.plan
        mode = f" {plan.dp_mode}" if plan.dp > 1 else ""
        step = "" if plan.step_time is None else f", {format_figures(plan.step_time)} ms a step"
        return (f"{self.flags}: {format_gib(self.worst_bytes)} per GPU, fits {format_gib(self.capacity)} "
                f"({plan.tp}×{plan.pp}×{plan.dp}{mode}, {plan.schedule_label}, b×m "
                f"{plan.micro_batch_size}×{plan.num_microbatches}{step})")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: the flags, the bytes and the plan's shape."""
        plan = self.plan
        return {"flags": self.flags, "worst_gpu_bytes": self.worst_bytes, "capacity_bytes": self.capacity,
                "tp": plan.tp, "pp": plan.pp, "dp": plan.dp, "dp_mode": plan.dp_mode, "schedule": plan.schedule,
                "virtual_stages": plan.virtual_stages, "micro_batch_size": plan.micro_batch_size,
                "microbatches": plan.num_microbatches, "step_time": plan.step_time}


class NoPlanFitsError(InfeasiblePlanError):
    """No plan fits the memory: the one-line reason, and the remedies that would fit (computed).

    Attributes:
        remedies: the changes under which a plan fits (empty: none in reach).
        tried: the changes that were tried, as flags.
    """

    def __init__(self, message: str, *, remedies: Sequence[Remedy] = (), tried: Sequence[str] = (),
                 hint: str = "", **fields: Any) -> None:
        super().__init__(message, **fields)
        self.reason = message
        self.remedies = tuple(remedies)
        self.tried = tuple(tried)
        self.hint = hint

    def with_remedies(self, remedies: Sequence[Remedy], tried: Sequence[str]) -> NoPlanFitsError:
        """This error with its advice appended to the message: what fits, or that nothing in reach does."""
        if remedies:
            advice = "what fits instead: " + "; ".join(remedy.line() for remedy in remedies)
        else:
            advice = "nothing in reach fits" + (f" (tried {', '.join(tried)})" if tried else "")
            advice += f"; {self.hint}" if self.hint else ""
        return NoPlanFitsError(f"{self.reason}; {advice}", remedies=remedies, tried=tried, hint=self.hint,
                               needed_bytes=self.needed_bytes, proven=self.proven)


def capacity_text(capacity: float, device_bytes: float, headroom: float, given: bool) -> str:
    """The capacity once, in one form: ``79.6 GiB (71.7 GiB usable, 10% headroom)``, or a given ``--memory``."""
    if given:
        return f"{format_gib(capacity)} (--memory)"
    return format_capacity(device_bytes, headroom=headroom)


def gpus_for_state(workload: Workload, capacity: float, optimizer: str | float = "adam") -> tuple[float, int]:
    """The model's weights and optimizer state in bytes, and the least GPUs of ``capacity`` that hold it sharded.

    ``optimizer`` as :meth:`~pipeplan.planner.memory.OptimizerBytes.for_optimizer` reads it; a
    byte count is searched with ddp only (nothing sharded), so its least GPU count is 1.
    """
    profile = workload.profile(workload.smallest_micro_batch)
    params, trained = profile.held_params()
    split = OptimizerBytes.for_optimizer(optimizer, 1)
    state = split.weights * params + (split.gradients + split.optimizer) * trained  # frozen modules: weights only
    return state, max(1, math.ceil(state / capacity)) if optimizer == "adam" else 1


def no_plan_fits(rejected: Sequence[Rejection], capacity: str, workload: Workload,
                 capacity_bytes: float, optimizer: str | float = "adam") -> InfeasiblePlanError:
    """The error when nothing fits (``capacity`` as :func:`capacity_text` writes it), without remedies yet."""
    if not rejected:
        return InfeasiblePlanError("no candidate could be evaluated")
    known = [r for r in rejected if r.needed_bytes is not None]
    if not known:
        bounds = [r for r in rejected if r.at_least_bytes is not None]
        if bounds:
            closest = min(bounds, key=lambda r: r.at_least_bytes or math.inf)
            state, gpus = gpus_for_state(workload, capacity_bytes, optimizer)
            hint = (f"the model's weights and optimizer state ({format_gib(state)}) need at least {gpus} GPUs of "
                    "this memory, fully sharded (fsdp), or fewer trained modules (--freeze)" if optimizer == "adam"
                    else f"with --optimizer {optimizer} bytes per parameter only ddp is searched (nothing is "
                         f"sharded): the model's state is {format_gib(state)} on every data-parallel rank; "
                         "--optimizer adam searches the sharded modes, or train fewer modules (--freeze)")
            return NoPlanFitsError(
                f"no plan fits a GPU of {capacity}: weights and optimizer state alone need at least "
                f"{format_gib(closest.at_least_bytes or 0)} per GPU even at pp={closest.config.pp}",
                hint=hint,
            )
        return NoPlanFitsError(f"no plan fits a GPU of {capacity}: {rejected[0].reason}")
    closest = min(known, key=lambda r: r.needed_bytes or math.inf)
    c = closest.config
    return NoPlanFitsError(
        f"no plan fits a GPU of {capacity}; the smallest memory "
        f"{'that fits' if closest.needed_proven else 'found to fit'} is {format_gib(closest.needed_bytes or 0)} "
        f"(pp={c.pp}, dp={c.dp}, {c.schedule_label}, micro-batch size {c.micro_batch_size}, "
        f"recompute {c.recompute}): {closest.reason}",
        needed_bytes=closest.needed_bytes, proven=closest.needed_proven,
    )


def _relaxations(options: Any, cluster: Cluster) -> list[tuple[str, Any]]:
    """Each option the command fixed, dropped; then the memory the command held back."""
    fixed = [("--dp-modes", "dp_modes"), ("--tp", "tp"), ("--pp", "pp"), ("--micro-batch-size", "micro_batch_size"),
             ("--partition", "partition"), ("--schedules", "schedules")]
    unfixed: dict[str, Any] = {field: None for _flag, field in fixed}
    found = [(f"without {flag}", replace(options, **{field: unfixed[field]})) for flag, field in fixed
             if getattr(options, field) is not None]
    if options.memory_capacity is None and options.headroom > 0:
        found.append(("--headroom 0", replace(options, headroom=0.0)))
    elif options.memory_capacity is not None and options.memory_capacity < cluster.memory_bytes:
        found.append(("without --memory", replace(options, memory_capacity=None)))
    return found


def _gpu_counts(cluster: Cluster, least: int) -> list[int]:
    """Up to :data:`_GPU_TRIES` larger GPU counts, doubling, from ``least`` on, in whole nodes past one node."""
    counts: list[int] = []
    count = cluster.num_gpus * 2
    while len(counts) < _GPU_TRIES and count <= 65536:
        if count >= least:
            node = cluster.gpus_per_node
            counts.append(count if count <= node else math.ceil(count / node) * node)
        count *= 2
    return sorted(set(counts))


def find_remedies(attempt: Attempt, workload: Workload, cluster: Cluster, options: Any,
                  capacity: float, *, progress: Callable[[int, int], None] | None = None,
                  ) -> tuple[list[Remedy], list[str]]:
    """The remedies under which ``attempt`` finds a plan that fits, and every one tried (flags).

    ``options`` are the failed search's :class:`~pipeplan.planner.search.SearchOptions`;
    ``capacity`` is what it allowed per GPU; the GPU counts start
    where the model's state, fully sharded, could fit it. ``progress(done, total)``
    after each attempt.
    """
    tries: list[tuple[str, Cluster, Any]] = [
        (flags, cluster, changed) for flags, changed in _relaxations(options, cluster)]
    _, least = gpus_for_state(workload, capacity, options.optimizer)
    tries += [(f"--gpus {count}", replace(cluster, num_gpus=count), options) for count in _gpu_counts(cluster, least)]
    remedies: list[Remedy] = []
    tried: list[str] = []
    more_gpus_fit = False
    for done, (flags, machine, changed) in enumerate(tries):
        if progress is not None:
            progress(done, len(tries))
        if flags.startswith("--gpus") and more_gpus_fit:
            continue  # the fewest GPUs that fit is the remedy
        tried.append(flags)
        plan = attempt(machine, changed)
        if plan is not None:
            remedies.append(Remedy(flags, plan, changed.capacity(machine)))
            more_gpus_fit = more_gpus_fit or flags.startswith("--gpus")
    if progress is not None:
        progress(len(tries), len(tries))
    return remedies, tried


def batch_note(space: Any) -> str:
    """A note when the global batch rules out data-parallel degrees the GPUs allow (``""``: it rules out none).

    ``space``: a :class:`~pipeplan.planner.space.SearchSpace`. A degree ``dp`` is ruled out when no
    micro-batch size ``b`` it may use has ``dp · b`` dividing the global batch (issue 33: ``--gpus 16
    --global-batch 500`` allows dp 1, 2, 4 only, and the best plan became a 4-stage pipeline where 512
    gives pp = 1). The note names the batch, the degrees it allowed and those it ruled out, and the
    nearest batches every degree divides (with ``--micro-batch-size`` fixed: ``dp · b``).
    """
    degrees = sorted({space.num_gpus // (tp * pp) for tp in space.tensor_degrees() for pp in space.pipeline_degrees(tp)})
    allowed = [dp for dp in degrees if space.micro_batches_for(dp)]
    if not degrees or allowed == degrees:
        return ""
    batch = space.global_batch
    nearest = [value for value in (_nearest_batch(space, degrees, -1), _nearest_batch(space, degrees, 1)) if value]
    ruled_out = [dp for dp in degrees if dp not in allowed]
    return (f"global batch {batch} splits over data-parallel degrees {', '.join(map(str, allowed)) or 'none'} only: "
            f"dp {', '.join(map(str, ruled_out))} (which these GPUs allow) were not tried; "
            + (f"global batch {' or '.join(map(str, nearest))} would allow every degree" if nearest else
               "no global batch near it allows every degree with these micro-batch sizes"))


def baseline_notes(baselines: Sequence[Any]) -> tuple[str, ...]:
    """Notes for the baselines that run another data-parallel mode than their reference records, and why.

    ``baselines``: :class:`~pipeplan.planner.baselines.Baseline` s; each one's ``changed`` line (issue
    33: on 40 GB cards the reference baseline switched from DDP to FSDP without a word in the table).
    """
    return tuple(baseline.changed for baseline in baselines if getattr(baseline, "changed", ""))


def _nearest_batch(space: Any, degrees: Sequence[int], direction: int) -> int:
    """The nearest global batch below (``direction`` -1) or above (+1) that every degree divides; 0: none near."""
    step = math.lcm(*degrees)
    start = space.global_batch // step + (1 if direction > 0 else 0)
    for multiple in range(start, start + direction * 64, direction):
        if multiple <= 0:
            return 0
        candidate = replace(space, global_batch=multiple * step)
        if multiple * step != space.global_batch and all(candidate.micro_batches_for(dp) for dp in degrees):
            return multiple * step
    return 0

"""``--engine`` and the engine's knobs for ``plan``: the flags, what they pin, what the output says of them.

    from pipeplan.cli._engine_args import add_engine_arguments, engine_workload, engine_assumptions
    add_engine_arguments(parser)           # --engine, --recompute, --sequence-parallel, --tp-comm-overlap
    workload = engine_workload(args, workload, "a100-80g")  # the knobs given, priced; the engine's kernels
    assumptions.update(engine_assumptions(args))   # each knob's value, given or assumed

The knobs are the engine's (:attr:`pipeplan.engines.Engine.knobs`); without ``--engine``
they are Megatron-LM's, whose tensor parallelism the step model prices today. A knob
that is not given keeps its default (``--recompute``: searched). A value the knob does
not take, or a knob the engine lacks, is one line and exit 2.
"""

from __future__ import annotations

import argparse
from typing import cast

from .. import engines
from ..errors import InvalidInputError
from ..engines import Engine
from ..plan import Recompute, TpCommOverlap
from ..planner import Workload

__all__ = ["add_engine_arguments", "engine_workload", "engine_assumptions", "DEFAULT_ENGINE", "KNOB_FLAGS"]

#: The engine whose knobs apply without ``--engine``: the step model prices Megatron-LM's tensor parallelism.
DEFAULT_ENGINE = "megatron"
#: Each knob's flag → its attribute on the parsed arguments.
KNOB_FLAGS = {"recompute": "recompute", "sequence-parallel": "sequence_parallel", "tp-comm-overlap": "tp_comm_overlap"}


def add_engine_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--engine`` and one flag per knob (checked against the engine's knobs by :func:`engine_workload`)."""
    megatron = engines.get(DEFAULT_ENGINE).knobs
    parser.add_argument("--engine", default=None, metavar="NAME",
                        help=f"the engine the plans are for: {', '.join(engines.names())}; the search spans only "
                             f"the schedules and data-parallel modes it runs, and its knobs are priced (default: "
                             f"every schedule and mode, with {DEFAULT_ENGINE}'s knobs: Megatron-LM's tensor "
                             "parallelism)")
    for flag, dest in KNOB_FLAGS.items():
        knob = megatron.get(flag)
        default = "searched" if knob.default is None else knob.default
        choices = dict.fromkeys(knob.choices)
        others = ""
        for engine in engines.names():
            if engine != DEFAULT_ENGINE and flag in engines.get(engine).knobs.names():
                theirs = engines.get(engine).knobs.get(flag)
                choices.update(dict.fromkeys(theirs.choices))
                others += f"; --engine {engine}: {theirs.doc}"
        parser.add_argument(f"--{flag}", dest=dest, default=None, metavar="|".join(choices),
                            help=f"pin it: {knob.doc} (default {default}){others}")


def _engine(args: argparse.Namespace) -> Engine:
    return engines.get(getattr(args, "engine", None) or DEFAULT_ENGINE)


def _given(args: argparse.Namespace) -> dict[str, str]:
    """The knobs given on the command line, each checked against the engine's (one line, exit 2, otherwise)."""
    engine = _engine(args)
    given = {}
    for flag, dest in KNOB_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        given[flag] = engine.knobs.get(flag, engine.name).parse(value, engine.name)
    return given


def engine_workload(args: argparse.Namespace, workload: Workload, device: str = "") -> Workload:
    """``workload`` with the knobs given pinned: ``--recompute`` the only mode searched, the TP knobs priced,
    and the engine's kernels on ``device`` (a preset name): its compute factor
    (:meth:`pipeplan.engines.Engine.compute_factor`) on a spec's layer times.

    Raises:
        InvalidInputError: an unknown engine, a knob it lacks, a value the knob does not take,
            or a knob a measured profile cannot answer for.
    """
    given = _given(args)
    if given.get("tp-comm-overlap") == "on" and given.get("sequence-parallel") == "off":
        # Megatron-LM's validate_args: the userbuffers overlap needs sequence parallelism
        raise InvalidInputError("--tp-comm-overlap on needs --sequence-parallel on (Megatron-LM overlaps the "
                                "all-gather and reduce-scatter of sequence parallelism); use --tp-comm-overlap "
                                "backward or off without it")
    if "sequence-parallel" in given or "tp-comm-overlap" in given:
        workload = workload.with_tensor_knobs(
            sequence_parallel=None if "sequence-parallel" not in given else given["sequence-parallel"] == "on",
            tp_comm_overlap=cast("TpCommOverlap | None", given.get("tp-comm-overlap")))
    factor = _engine(args).compute_factor(device)
    if factor != 1.0 and workload.spec is not None:  # a measured profile's times are its engine's already
        workload = workload.with_compute_factor(factor)
    if "recompute" in given:
        workload = workload.with_recompute(given["recompute"])
    else:
        searched = _searched_recompute(_engine(args))
        if searched is not None and workload.spec is not None:  # a measured profile answers for its own modes
            workload = workload.with_recompute_modes(searched)
    return workload


def _searched_recompute(engine: Engine) -> tuple[Recompute, ...] | None:
    """The recompute modes the engine lets the planner search, when not every one it has (torchtitan's)."""
    if "recompute" not in engine.knobs.names():
        return None
    return engine.knobs.get("recompute").searched


_TENSOR_PARALLEL = {
    ("on", "backward"): ("Megatron TP with sequence parallelism inside a node: 4 ring passes of a block's "
                         "activation in its forward, exposed (no --tp-comm-overlap), and 4 in its backward "
                         "beside the weight-gradient GEMMs (what they cannot cover shows); GEMMs divided by tp "
                         "and timed at their own efficiency"),
}


def _tensor_parallel(sequence_parallel: str, overlap: str) -> str:
    """The ``tensor parallel`` assumption for the knobs' values (the defaults: today's sentence, word for word)."""
    known = _TENSOR_PARALLEL.get((sequence_parallel, overlap))
    if known is not None:
        return known
    how = ("with sequence parallelism (all-gathers and reduce-scatters; norms and dropouts split)"
           if sequence_parallel == "on" else
           "without sequence parallelism (all-reduces of the same ring volume; norms, dropouts and residuals "
           "run and held whole on every GPU of the group)")
    hidden = {"off": "4 ring passes of a block's activation in its forward and 4 in its backward, all exposed",
              "backward": "4 ring passes of a block's activation in its forward, exposed (no --tp-comm-overlap), "
                          "and 4 in its backward beside the weight-gradient GEMMs (what they cannot cover shows)",
              "on": "4 ring passes of a block's activation in its forward behind its forward GEMMs "
                    "(--tp-comm-overlap) and 4 in its backward behind its backward GEMMs (what they cannot "
                    "cover shows)"}[overlap]
    return f"Megatron TP {how} inside a node: {hidden}; GEMMs divided by tp and timed at their own efficiency"


def engine_assumptions(args: argparse.Namespace, device: str = "") -> dict[str, str]:
    """Each knob's value as the plan assumed it (given, or the engine's default), and the TP sentence they make.

    Keys: ``engine``, ``recompute``, ``sequence-parallel``, ``tp-comm-overlap``, and ``tensor parallel``
    (today's sentence when the TP knobs are at their defaults); ``kernels`` where the engine's kernels on
    ``device`` are priced by a compute factor (:func:`engine_workload`) and the model is a spec.
    """
    engine = _engine(args)
    given = _given(args)
    megatron = engines.get(DEFAULT_ENGINE).knobs.defaults()
    values: dict[str, str] = {}
    for flag in KNOB_FLAGS:
        default = megatron[flag] if flag not in engine.knobs.names() else engine.knobs.get(flag).default
        if flag in given:
            values[flag] = f"{given[flag]} (given: --{flag})"
        elif default is None:
            modes = _searched_recompute(engine) or ("none", "selective", "full")
            values[flag] = f"searched: {', '.join(modes)} (per stage, the cheapest in time that fits)"
        else:
            values[flag] = f"{default} (assumed: give --{flag} to pin it)"
    sequence_parallel = given.get("sequence-parallel", megatron["sequence-parallel"] or "on")
    overlap = given.get("tp-comm-overlap", megatron["tp-comm-overlap"] or "backward")
    name = engine.name if getattr(args, "engine", None) else f"{engine.name} (assumed: give --engine to choose)"
    if not engine.knobs.knobs:
        name += ("; its knobs are not priced yet: the step prices Megatron-LM's tensor parallelism; the search "
                 "spans only what it runs")
    out = {"engine": name, **values, "tensor parallel": _tensor_parallel(sequence_parallel, overlap)}
    factor = engine.compute_factor(device)
    if factor != 1.0 and not getattr(args, "profile", None):
        out["kernels"] = (f"{engine.name}'s kernels on {device}: each layer's compute x {factor:.3f} beside the "
                          "device's fused-kernel model (fitted to the engine's published runs: docs/engines.md)")
    return out

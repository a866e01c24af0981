"""``--engine`` and the engine's knobs, one owner for every verb that builds a model from shapes.

    from pipeplan.cli._engine_args import add_engine_arguments, engine_workload, engine_assumptions
    add_engine_arguments(parser, unpinned=SEARCHED)   # --engine, --recompute, --sequence-parallel, --tp-comm-overlap
    workload = engine_workload(args, workload)        # the knobs given, priced (Workload.with_recompute, ...)
    assumptions.update(engine_assumptions(args))      # each knob's value, given or assumed
    costs = engine_costs(args)                        # plan: DeepSpeed's gradient sync and host hooks (SearchOptions)
    profile = spec_workload(args, spec, device, link).profile(args.micro_batch_size)   # model, simulate, partition

``plan``, ``model``, ``simulate --preset/--spec`` and ``partition --preset/--spec``
take the same flags, refuse the same values with the same line, and price them the
same way: through :meth:`pipeplan.planner.Workload.from_spec` (the layer's kernels
and, at ``--tp > 1``, its tensor-parallel collectives).

The knobs are the engine's (:attr:`pipeplan.engines.Engine.knobs`); without ``--engine``
they are Megatron-LM's, whose tensor parallelism the step model prices today. The values
each flag takes are read from the engine's :class:`~pipeplan.engines.record.Knob`, so a
mode an engine adds is taken here without a change. ``--recompute`` also takes
``reference`` (the spec's own recipe, per module) and a mode per module,
``vision=full,llm=selective`` (a module left out: ``none``). Megatron-LM's
``--recompute-method block|uniform --recompute-num-layers N`` are ``block:N`` and
``uniform:N`` (:func:`pipeplan.plan.stage_recompute`; one mode for the whole model, and
``uniform:1`` is ``full``); an engine without them refuses them. A knob that is not given
keeps its default; ``--recompute`` not given is searched by ``plan`` and the spec's
reference recipe for the other verbs. A value the knob does not take, or a knob the
engine lacks, is one line and exit 2. ``--sequence-parallel`` and ``--tp-comm-overlap``
take a value (``on|off``; the bare switch is gone). Every engine's knobs are flags (read off
the records, the default engine's first); DeepSpeed's (``--overlap-comm``, ``--reduce-bucket-size``,
``--hook-cost``, ``--contiguous-gradients``, ``--stage3-prefetch-bucket-size``,
``--stage3-max-live-parameters``) and plain torch's DDP knobs (``--bucket-cap-mb``,
``--find-unused-parameters``) change the step, not the layers: ``plan`` prices them
(:func:`engine_costs`), the other verbs check them and report them. torchtitan's and plain torch's ``--compile on|off`` changes
the layers' kernels on every verb (:meth:`pipeplan.engines.Engine.compute_factor`); Megatron-LM and
DeepSpeed refuse it with the reason their :class:`~pipeplan.engines.record.Knob` gives
(``elsewhere``). torchtitan's ``--reshard-after-forward never`` keeps FSDP's layers gathered
(:meth:`pipeplan.planner.Workload.with_reshard_after_forward`); ``always`` is taken by ``plan`` only
with ``--pp 1``. :func:`given_knobs` is what an export writes of them.
"""

from __future__ import annotations

import argparse
from typing import Any, Final, Literal, cast

from .. import data_parallel, engines
from ..errors import InvalidInputError
from ..engines import Engine, Knob
from ..engines._eager import ASYNC_TP_HIDDEN
from ..models.spec import ModelSpec
from ..plan import RECOMPUTE_MODES, Recompute, TpCommOverlap, stage_recompute
from ..planner import Workload
from ..planner.engine_costs import EngineCosts
from ..planner.engine_memory import GATHERED_INPUT_ENGINES

__all__ = ["add_engine_arguments", "engine_workload", "given_knobs", "engine_costs", "engine_assumptions", "recompute_pin",
           "spec_workload", "layer_options", "DEFAULT_ENGINE", "KNOB_FLAGS", "REFERENCE", "SEARCHED", "Unpinned"]

#: The engine whose knobs apply without ``--engine``: the step model prices Megatron-LM's tensor parallelism.
DEFAULT_ENGINE = "megatron"
#: Each knob's flag → its attribute on the parsed arguments: every engine's knobs, the default engine's first.
KNOB_FLAGS = {name: name.replace("-", "_") for engine in (DEFAULT_ENGINE, *engines.names())
              for name in engines.get(engine).knobs.names()}
#: ``--recompute reference``: the spec's own recipe, a mode per module (``none`` for a spec without one).
REFERENCE: Final = "reference"
#: What ``--recompute`` not given means: searched per stage (``plan``) or the spec's reference recipe.
SEARCHED: Final = "searched"
Unpinned = Literal["searched", "reference"]
_PER_MODULE = "or a mode per module like vision=full,llm=selective"


def add_engine_arguments(parser: Any, *, unpinned: Unpinned = SEARCHED) -> None:
    """Add ``--engine`` and one flag per knob to ``parser`` (a parser or an argument group).

    ``unpinned``: what ``--recompute`` not given means for this verb (only the help
    says it; :func:`engine_workload` and :func:`engine_assumptions` take it too).
    The values are checked by :func:`engine_workload` against the engine's knobs.
    """
    megatron = engines.get(DEFAULT_ENGINE).knobs
    parser.add_argument("--engine", default=None, metavar="NAME",
                        help=f"the engine the model runs in: {', '.join(engines.names())}; its knobs are priced "
                             f"(plan: the search spans only the schedules and data-parallel modes it runs; default: "
                             f"{DEFAULT_ENGINE}'s knobs, Megatron-LM's tensor parallelism, and every schedule and mode)")
    for flag, dest in KNOB_FLAGS.items():
        if flag not in megatron.names():  # another engine's own knob (DeepSpeed's): its record documents it
            _add_own_knob(parser, flag, dest)
            continue
        knob = megatron.get(flag)
        values = dict.fromkeys(knob.choices)
        others = ""
        for name in engines.names():  # another engine's values of the knob (torchtitan's op, every:N)
            if name != DEFAULT_ENGINE and flag in engines.get(name).knobs.names():
                theirs = engines.get(name).knobs.get(flag)
                if set(theirs.choices) - set(values):
                    values.update(dict.fromkeys(theirs.choices))
                    others += f"; --engine {name}: {theirs.doc}"
        choices = "|".join(values)
        default = (getattr(knob, "assumed", "") or "searched") if knob.default is None else knob.default
        if flag == "recompute":
            choices += f"|{REFERENCE}|MODULE=MODE,..."
            default = ("searched: none, selective, full per stage" if unpinned == SEARCHED
                       else "reference: the spec's own recipe per module, none for a spec without one")
            doc = (f"{knob.doc.split('; not given')[0]}; reference: the spec's own recipe per module; per module: "
                   "vision=full,llm=selective (a module left out: none)")
        else:
            doc = knob.doc
        parser.add_argument(f"--{flag}", dest=dest, default=None, metavar=choices,
                            help=f"pin it: {doc} (default {default}){others}".replace("%", "%%"))


def _add_own_knob(parser: Any, flag: str, dest: str) -> None:
    """The flag of a knob only another engine than the default has (``--overlap-comm``: DeepSpeed's)."""
    owners = [engines.get(name) for name in engines.names() if flag in engines.get(name).knobs.names()]
    knob = owners[0].knobs.get(flag)
    default = knob.default if knob.default is not None else (getattr(knob, "assumed", "") or "searched")
    unit = (getattr(knob, "unit", "") or "").upper().replace(" ", "_")
    engine_flags = " or ".join(f"--engine {owner.name}" for owner in owners)
    parser.add_argument(f"--{flag}", dest=dest, default=None, metavar="|".join(knob.choices + ((unit,) if unit else ())),
                        help=f"pin it ({engine_flags}): {knob.doc} (default {default})".replace("%", "%%"))


def _engine(args: argparse.Namespace) -> Engine:
    """``--engine``'s record (default Megatron-LM's); an unknown name is one line naming the engines."""
    name = getattr(args, "engine", None) or DEFAULT_ENGINE
    if name not in engines.names():
        raise InvalidInputError(f"--engine must be one of {', '.join(engines.names())}, got {name!r}")
    return engines.get(name)


def _parse_recompute(text: str, engine: Engine) -> str:
    """``--recompute``'s value, checked against the engine's modes: a mode, ``reference`` or ``a=m,b=m`` (normalised)."""
    knob = engine.knobs.get("recompute", engine.name)
    if text == REFERENCE:
        return text
    if "=" not in text:
        try:
            mode = knob.parse(text, engine.name)
        except InvalidInputError as error:
            raise InvalidInputError(f"{error} ({REFERENCE}: the spec's own recipe; {_PER_MODULE})") from None
        return "full" if mode == "uniform:1" else mode  # one name for Megatron-LM's uniform 1: full
    seen: dict[str, str] = {}
    for part in text.split(","):
        name, _, mode = (piece.strip() for piece in part.partition("="))
        if not name or "=" not in part:
            raise InvalidInputError(f"--recompute {text!r}: {part.strip()!r} is not MODULE=MODE "
                                    "(like vision=full,llm=selective)")
        try:
            knob.parse(mode, engine.name)
        except InvalidInputError:
            raise InvalidInputError(f"--recompute for {engine.name}: module {name!r} must take one of "
                                    f"{', '.join(knob.choices)}, got {mode!r}") from None
        if stage_recompute(mode) is not None:
            raise InvalidInputError(f"--recompute {text!r}: {mode} is Megatron-LM's method per pipeline stage; "
                                    f"give it as the one mode (--recompute {mode}), not per module")
        if name in seen:
            raise InvalidInputError(f"--recompute {text!r}: module {name!r} is given twice")
        seen[name] = mode
    return ",".join(f"{name}={mode}" for name, mode in seen.items())


def _given(args: argparse.Namespace) -> dict[str, str]:
    """The knobs given on the command line, each checked against the engine's (one line, exit 2, otherwise)."""
    engine = _engine(args)
    given = {}
    for flag, dest in KNOB_FLAGS.items():
        value = getattr(args, dest, None)
        if value is None:
            continue
        if flag not in engine.knobs.names():
            _refuse_absent(engine, flag)
        knob = engine.knobs.get(flag, engine.name)  # the engine has the knob (one line naming its knobs)
        given[flag] = _parse_recompute(value, engine) if flag == "recompute" else knob.parse(value, engine.name)
    if given.get("async-tp") == "on" and given.get("compile") not in ("on", "model"):
        # torchtitan/distributed/tensor_parallel.py (0.3.0): "Async TP requires 'model' in --compile.components"
        raise InvalidInputError("--async-tp on needs --compile on or model (torchtitan refuses async TP without "
                                "torch.compile)")
    if given.get("reshard-after-forward") == "always" and hasattr(args, "pp") and args.pp != 1:
        # torchtitan/distributed/fsdp.py: with a pipeline its default keeps the parameters gathered, which pipeplan
        # prices; always would gather each layer twice a microbatch through the pipeline, not priced
        raise InvalidInputError("--reshard-after-forward always is priced without a pipeline only: give --pp 1 "
                                "(with a pipeline pipeplan prices torchtitan's default, parameters kept gathered)")
    if given.get("tp-comm-overlap") == "on" and given.get("sequence-parallel") == "off":
        # Megatron-LM's validate_args: the userbuffers overlap needs sequence parallelism
        raise InvalidInputError("--tp-comm-overlap on needs --sequence-parallel on (Megatron-LM overlaps the "
                                "all-gather and reduce-scatter of sequence parallelism); use --tp-comm-overlap "
                                "backward or off without it")
    return given


def _refuse_absent(engine: Engine, flag: str) -> None:
    """One line for a knob ``engine`` lacks on purpose (another engine's knob says why: ``--compile``); else nothing
    (:meth:`~pipeplan.engines.record.Knobs.get` says it has no such knob)."""
    for name in engines.names():
        other = engines.get(name).knobs
        if flag in other.names() and other.get(flag).elsewhere:
            raise InvalidInputError(f"--{flag}: {engine.name} has no such knob: {other.get(flag).elsewhere}")


def given_knobs(args: argparse.Namespace) -> dict[str, str]:
    """The knobs given on the command line (flag name → value), checked against ``--engine``'s: what an export
    writes where its files carry them (:meth:`pipeplan.engines.Engine.export`, ``knobs``)."""
    return _given(args)


def _reference(spec: ModelSpec | None) -> dict[str, Recompute] | Recompute:
    """The spec's own recipe: its reference training's mode per module, ``"none"`` without one."""
    if spec is None or spec.training is None:
        return "none"
    return {module.name: spec.training.mode_of(module.name) for module in spec.modules}


def recompute_pin(args: argparse.Namespace, spec: ModelSpec | None,
                  unpinned: Unpinned = SEARCHED) -> Recompute | dict[str, Recompute] | None:
    """What ``--recompute`` pins for ``spec``: one mode, a mode per module, or ``None`` (searched).

    ``reference`` (given, or not given where ``unpinned`` is ``"reference"``) is the
    spec's recipe per module. A module that ``spec`` lacks is one line naming its modules.
    """
    text = _given(args).get("recompute")
    if text is None:
        return None if unpinned == SEARCHED else _reference(spec)
    if text == REFERENCE:
        return _reference(spec)
    if "=" not in text:
        return text
    if spec is None:
        raise InvalidInputError(f"--recompute {text}: a mode per module needs a model spec (--preset or --spec); "
                                "a measured profile has no modules")
    modules = [module.name for module in spec.modules]
    pinned: dict[str, Recompute] = {}
    for part in text.split(","):
        name, _, mode = part.partition("=")
        if name not in modules:
            raise InvalidInputError(f"--recompute: model {spec.name!r} has no module {name!r} (its modules: "
                                    f"{', '.join(modules)})")
        pinned[name] = mode
    return pinned


def engine_workload(args: argparse.Namespace, workload: Workload, unpinned: Unpinned = SEARCHED, *,
                    device: str = "") -> Workload:
    """``workload`` with the knobs given pinned: ``--recompute`` the only mode(s) costed, the TP knobs priced,
    and the engine's kernels on ``device`` (a preset name): its compute factor
    (:meth:`pipeplan.engines.Engine.compute_factor`) on a spec's layer times.

    ``unpinned``: ``--recompute`` not given is searched (``plan``) or the spec's
    reference recipe (``model``, ``simulate``, ``partition``).

    Raises:
        InvalidInputError: an unknown engine, a knob it lacks, a value the knob does not take,
            an unknown module, or a knob a measured profile cannot answer for.
    """
    given = _given(args)
    factor = _engine(args).compute_factor(device, given)
    if factor != 1.0 and workload.spec is not None:  # a measured profile's times are its engine's already
        workload = workload.with_compute_factor(factor)
    # the engine's own TP (torch's DTensor: nothing hidden, or async TP) where --tp-comm-overlap is not given
    overlap = given.get("tp-comm-overlap") or (_engine(args).tp_overlap(given) if workload.spec is not None else None)
    if "sequence-parallel" in given or overlap is not None:
        workload = workload.with_tensor_knobs(
            sequence_parallel=None if "sequence-parallel" not in given else given["sequence-parallel"] == "on",
            tp_comm_overlap=cast("TpCommOverlap | None", overlap))
    if given.get("reshard-after-forward") == "never":  # FSDP2 keeps each layer gathered for its backward
        workload = workload.with_reshard_after_forward(False)
    if _engine(args).name in GATHERED_INPUT_ENGINES:  # DTensor saves a none block's gathered inputs whole
        workload = workload.with_saved_gathered_inputs()
    pin = recompute_pin(args, workload.spec, unpinned)
    if pin is not None:
        workload = workload.with_recompute(pin)
    elif workload.spec is not None:  # searched: what the engine lets the planner choose (a profile: its own modes)
        searched = _searched_recompute(_engine(args))
        if searched is not None:
            workload = workload.with_recompute_modes(searched)
    return workload


def engine_costs(args: argparse.Namespace) -> EngineCosts | None:
    """What the engine's knobs (given, or its defaults) change in the step beyond the workload: DeepSpeed's gradient
    sync per ZeRO stage and its host hooks (:class:`~pipeplan.planner.engine_costs.EngineCosts`); ``None`` without
    ``--engine`` or for an engine priced in the workload alone; ``--grad-reduce-dtype`` is priced without
    ``--engine`` too, as Megatron-LM's)."""
    given = _given(args)
    if not getattr(args, "engine", None) and "grad-reduce-dtype" not in given:
        return None
    return EngineCosts.of(_engine(args), given)


def _searched_recompute(engine: Engine) -> tuple[Recompute, ...] | None:
    """The recompute modes the engine lets the planner search, when not every one it has (torchtitan's)."""
    if "recompute" not in engine.knobs.names():
        return None
    return engine.knobs.get("recompute").searched


def spec_workload(args: argparse.Namespace, spec: ModelSpec, device: Any, link: Any = None) -> Workload:
    """The workload of ``spec`` at ``--tp`` with the knobs given (``--recompute`` not given: the reference recipe).

    What ``model``, ``simulate --preset/--spec`` and ``partition --preset/--spec`` cost:
    ``spec_workload(...).profile(args.micro_batch_size)`` is the layer profile, priced as
    ``plan`` prices it (``link``: the link inside a node, default the device's).
    """
    workload = Workload.from_spec(spec, device, tensor_parallel=args.tp, tp_link=link)
    return engine_workload(args, workload, unpinned=REFERENCE, device=getattr(device, "name", ""))


def layer_options(args: argparse.Namespace, spec: ModelSpec) -> dict[str, Any]:
    """``recompute``, ``tensor_parallel`` and ``sequence_parallel`` for :func:`~pipeplan.models.layer_costs.layer_costs`.

    The same values :func:`spec_workload` prices (the FLOP and kernel columns of ``model``).
    """
    given = _given(args)
    pin = recompute_pin(args, spec, REFERENCE)
    default = engines.get(DEFAULT_ENGINE).knobs.get("sequence-parallel").default
    sequence = given.get("sequence-parallel", default) == "on" and args.tp > 1
    return {"recompute": pin if pin is not None else "none", "tensor_parallel": args.tp, "sequence_parallel": sequence}


_TENSOR_PARALLEL = {
    ("on", "backward"): ("Megatron TP with sequence parallelism inside a node: 4 ring passes of a block's "
                         "activation in its forward, exposed (no --tp-comm-overlap), and 4 in its backward "
                         "beside the weight-gradient GEMMs (what they cannot cover shows); GEMMs divided by tp "
                         "and timed at their own efficiency"),
}


def _tensor_parallel(sequence_parallel: str, overlap: str, who: str = "Megatron TP") -> str:
    """The ``tensor parallel`` assumption for the knobs' values (the defaults: today's sentence, word for word);
    ``who``: whose tensor parallelism (torch's DTensor for the torch engines)."""
    known = _TENSOR_PARALLEL.get((sequence_parallel, overlap)) if who == "Megatron TP" else None
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
                    "cover shows)",
              "async": f"4 ring passes of a block's activation in its forward and 4 in its backward, "
                       f"{ASYNC_TP_HIDDEN:g} of each hidden behind the layer's own pass (--async-tp on, torch's "
                       "async TP)"}[overlap]
    return f"{who} {how} inside a node: {hidden}; GEMMs divided by tp and timed at their own efficiency"


def _modes_text(pin: Recompute | dict[str, Recompute], spec: ModelSpec | None) -> str:
    """``full`` or ``vision full, llm selective``: a mode per module whose mode changes a cost, in the spec's order."""
    if isinstance(pin, str):
        return pin
    if spec is None:
        shown = dict(pin)
    else:  # every module (one left out: none), shown where its mode changes a cost
        counted = {member for unit in spec.recompute_units() for member in unit}
        every = spec.recompute_modes(pin)
        shown = {name: mode for name, mode in every.items() if name in counted} or every
    if len(set(shown.values())) == 1:
        return next(iter(shown.values()))
    return ", ".join(f"{name} {mode}" for name, mode in shown.items())


def engine_assumptions(args: argparse.Namespace, spec: ModelSpec | None = None,
                       unpinned: Unpinned = SEARCHED, *, device: str = "") -> dict[str, str]:
    """Each knob's value as the output assumed it (given, or the engine's default), and the TP sentence they make.

    Keys: ``engine``, ``recompute``, ``sequence-parallel``, ``tp-comm-overlap``, and ``tensor parallel``
    (today's sentence when the TP knobs are at their defaults). ``spec``: the model, for
    the modes of ``reference`` and of a mode per module.
    """
    engine = _engine(args)
    given = _given(args)
    megatron = engines.get(DEFAULT_ENGINE).knobs.defaults()
    values: dict[str, str] = {}
    for flag in KNOB_FLAGS:
        if flag not in engine.knobs.names() and flag not in megatron:
            continue  # another engine's own knob
        knob = engine.knobs.get(flag) if flag in engine.knobs.names() else engines.get(DEFAULT_ENGINE).knobs.get(flag)
        default, assumed = knob.default, getattr(knob, "assumed", "")
        if flag == "recompute":
            values[flag] = _recompute_assumption(args, spec, given, unpinned)
        elif flag in given:
            values[flag] = f"{given[flag]} (given: --{flag}{_outside_modes(args, knob)})"
        elif default is None and assumed:
            values[flag] = f"{assumed} (assumed: give --{flag} to pin it)"
        else:
            values[flag] = f"{default} (assumed: give --{flag} to pin it)"
    sequence_parallel = given.get("sequence-parallel", megatron["sequence-parallel"] or "on")
    own = engine.tp_overlap(given)  # the torch engines' DTensor tensor parallelism
    if own is not None and "tp-comm-overlap" not in given:
        values["tp-comm-overlap"] = (f"{own} ({engine.name}: torch's DTensor tensor parallelism, "
                                     + ("async TP: --async-tp on)" if own == "async" else
                                        "every collective waited for where its result is used)"))
    overlap = given.get("tp-comm-overlap") or own or megatron["tp-comm-overlap"] or "backward"
    name = engine.name if getattr(args, "engine", None) else f"{engine.name} (assumed: give --engine to choose)"
    if not engine.knobs.knobs:
        name += ("; its knobs are not priced yet: the step prices Megatron-LM's tensor parallelism; the search "
                 "spans only what it runs")
    who = "Megatron TP" if own is None else "torch DTensor TP"
    out = {"engine": name, **values, "tensor parallel": _tensor_parallel(sequence_parallel, overlap, who)}
    factor = engine.compute_factor(device, given)
    compiled = given.get("compile") in ("on", "model")
    if factor != 1.0 and not getattr(args, "profile", None):
        how = (f"torch.compile: the eager factor {engine.compute_factor(device):.3f} / its compile speedup "
               f"{engine.compile_speedup:.3f}, " if compiled else "")
        out["kernels"] = (f"{engine.name}'s kernels on {device}: each layer's compute x {factor:.3f} beside the "
                          f"device's fused-kernel model ({how}fitted to the engine's published runs: docs/engines.md)")
    elif compiled and not getattr(args, "profile", None):
        out["kernels"] = (f"{engine.name}'s kernels on {device}: torch.compile priced as the device's fused-kernel "
                          "model (x 1: no eager factor is fitted on this device, so compile changes nothing here)")
    return out


def _outside_modes(args: argparse.Namespace, knob: Knob) -> str:
    """``"; ..."`` where ``knob`` sets some data-parallel modes only and others are searched or pinned (all searched
    without ``--dp-modes``); ``""`` otherwise."""
    if not knob.modes:
        return ""
    text = getattr(args, "dp_modes", None)
    modes = data_parallel.parse_modes(text) if text else list(data_parallel.names())
    others = [mode for mode in modes if mode not in knob.modes]
    if not others:
        return ""
    return f"; it sets {'/'.join(knob.modes)} only: {', '.join(others)} priced in each mode's own dtype"


def _recompute_assumption(args: argparse.Namespace, spec: ModelSpec | None, given: dict[str, str],
                          unpinned: Unpinned) -> str:
    """``--recompute``'s line: the mode(s) given, searched, or the reference recipe assumed."""
    text = given.get("recompute")
    if text is None and unpinned == SEARCHED:
        searched = _searched_recompute(_engine(args)) or RECOMPUTE_MODES
        return f"searched: {', '.join(searched)} (per stage, the cheapest in time that fits)"
    pin = recompute_pin(args, spec, unpinned)
    modes = _modes_text(pin if pin is not None else "none", spec)
    if text is None:
        return (f"{REFERENCE}: {modes} (assumed: the spec's own recipe, none without one; give --recompute to "
                "pin it)")
    if text == REFERENCE:
        return f"{REFERENCE}: {modes} (given: --recompute)"
    return f"{modes} (given: --recompute)"

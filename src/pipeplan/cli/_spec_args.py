"""Arguments shared by the verbs that build a layer profile from a model spec.

    parser.add_argument_group(...)  # via add_spec_arguments(parser)
    profile = profile_from_spec_args(args)   # --preset/--spec, --gpu or --device, --micro-batch-size, ...
"""

from __future__ import annotations

import argparse
import re
from dataclasses import replace
from typing import Any

from .. import hardware, presets, units
from ..hardware.device_file import read_device
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..models.spec import ModelSpec
from ._common import name_choice, renamed_flag
from ._engine_args import REFERENCE, add_engine_arguments, spec_workload

__all__ = ["add_spec_arguments", "add_shape_arguments", "shape_from_args", "planned_shape", "shape_note", "spec_from_args", "profile_from_spec_args", "uses_spec", "human_count",
           "add_device_argument", "device_from_args", "add_mfu_argument", "settle_spec_options",
           "defaults_assumption"]


def add_spec_arguments(parser: argparse.ArgumentParser, *, required: bool = False) -> None:
    """Add ``--preset``/``--spec`` and the hardware and microbatch options."""
    group = parser.add_argument_group("model from shapes")
    group.add_argument("--preset", type=name_choice("--preset", presets.names), default=None,
                       help=f"a model preset: {', '.join(presets.names())}")
    group.add_argument("--spec", default=None, metavar="FILE", help="a ModelSpec .json (or .yaml) file")
    group.add_argument("--gpu", type=name_choice("--gpu", hardware.device_names), default=None,
                       help=f"device: {', '.join(hardware.device_names())} (default h100-80g)")
    add_device_argument(group)
    group.add_argument("--micro-batch-size", type=int, default=None, help="examples per microbatch (default 1)")
    add_mfu_argument(group)
    group.add_argument("--tp", type=int, default=None, help="tensor-parallel degree (Megatron TP; default 1)")
    add_engine_arguments(group, unpinned=REFERENCE)  # --engine and its knobs, as plan takes them (cli/_engine_args.py)
    renamed_flag(group, "--tensor-parallel", "--tp", "the tensor-parallel degree, as in plan")
    add_shape_arguments(group)
    group.add_argument("--freeze", default=None, metavar="MODULES", help="comma-separated modules to freeze")
    group.add_argument("--unfreeze", default=None, metavar="MODULES", help="comma-separated modules to train")


#: The spec options' defaults, filled in by :func:`settle_spec_options` (``None`` in the parser: not given).
_SPEC_DEFAULTS: dict[str, Any] = {"gpu": "h100-80g", "micro_batch_size": 1, "tp": 1}
_SPEC_FLAGS = ("gpu", "device", "micro_batch_size", "mfu", "engine", "recompute", "sequence_parallel",
               "tp_comm_overlap", "tp", "action_horizon", "text_tokens", "cameras", "image_size", "freeze", "unfreeze")


def settle_spec_options(args: argparse.Namespace, *, applies: bool, what: str = "") -> None:
    """Refuse the options of a model from shapes where no ``--preset``/``--spec`` is given; fill their defaults.

    ``applies``: the verb builds the model from shapes this time; ``what``: the input it has
    instead, for the message (``"a profile file"``). Every verb that calls
    :func:`add_spec_arguments` calls this first.
    """
    given = [f"--{key.replace('_', '-')}" for key in _SPEC_FLAGS if getattr(args, key, None) is not None]
    if given and not applies:
        raise InvalidInputError(f"{', '.join(given)} appl{'ies' if len(given) == 1 else 'y'} to a model from shapes "
                                f"(--preset or --spec), not to {what or 'this input'}")
    for key, value in _SPEC_DEFAULTS.items():
        if getattr(args, key, None) is None:
            setattr(args, key, value)


def add_mfu_argument(parser: Any) -> None:
    """Add ``--mfu`` (a fraction ``0.4`` or a percentage ``40%``) to a parser or an argument group."""
    parser.add_argument("--mfu", type=units.argparse_type(units.parse_fraction, "--mfu"), default=None,
                        help="the flat cost model: every FLOP at this fraction of peak, e.g. 0.4 or 40%% "
                             "(default: per-operator)")


def add_shape_arguments(parser: Any) -> None:
    """Add a preset's shape options (``--action-horizon``, ``--text-tokens``, ``--cameras``, ``--image-size``)."""
    for option, what in (("action-horizon", "actions per chunk"), ("text-tokens", "text tokens per example"),
                         ("cameras", "images per example"), ("image-size", "image side in pixels")):
        parser.add_argument(f"--{option}", type=int, default=None, metavar="N",
                            help=f"{what}, for a preset that has it (pipeplan presets --json lists its options)")


def _flag(key: str) -> str:
    return "--" + key.replace("_", "-")


def shape_from_args(args: argparse.Namespace) -> dict[str, int]:
    """The shape options given (``{"cameras": 2}``), checked against ``--preset``: one line naming the flag.

    Refused: an option without ``--preset`` (a ``--spec`` file gives its shapes itself; a
    profile was measured at its own), one the preset lacks, a size outside 1..
    :data:`pipeplan.presets.OPTION_LIMITS`.
    """
    shape = {key: getattr(args, key) for key in presets.OPTION_LIMITS if getattr(args, key, None) is not None}
    preset = getattr(args, "preset", None)
    if shape and not preset:
        given = ", ".join(_flag(key) for key in shape)
        instead = ("a --profile was measured at its own shapes" if getattr(args, "profile", None)
                   else "a --spec file gives its shapes itself")
        raise InvalidInputError(f"{given} appl{'ies' if len(shape) == 1 else 'y'} to --preset; {instead}")
    if preset and preset in presets.names():
        for key, value in shape.items():
            if key not in presets.options(preset):
                has = ", ".join(_flag(k) for k in presets.options(preset)) or "none"
                raise InvalidInputError(f"preset {preset!r} has no {_flag(key)}; its options: {has}")
            limit = presets.OPTION_LIMITS[key]
            if not 1 <= value <= limit:
                raise InvalidInputError(f"{_flag(key)} of preset {preset!r} must be an integer in 1..{limit}, "
                                        f"got {value}")
    return shape


def planned_shape(args: argparse.Namespace) -> dict[str, int] | None:
    """Every shape option of ``--preset`` as the model is built (the given ones, else the preset's defaults).

    ``None`` without a preset (a spec file or a profile: their shapes are their own).
    """
    preset = getattr(args, "preset", None)
    if not preset:
        return None
    return {**presets.options(preset), **shape_from_args(args)}


def shape_note(args: argparse.Namespace) -> str | None:
    """The planned shape in words, for a plan's assumptions: ``pi0.5: action_horizon 50, cameras 2 (given), ...``."""
    shape = planned_shape(args)
    if shape is None:
        return None
    if not shape:
        return f"{args.preset} (a preset without shape options)"
    given = shape_from_args(args)
    parts = [f"{key} {value}" + (" (given)" if key in given else "") for key, value in shape.items()]
    return f"{args.preset}: " + ", ".join(parts) + "; the rest of the preset as published"


def add_device_argument(parser: Any) -> None:
    """Add ``--device FILE`` (a parser or an argument group)."""
    parser.add_argument("--device", default=None, metavar="FILE",
                        help="a device file from pipeplan calibrate: its measured device replaces --gpu's preset")


def device_from_args(args: argparse.Namespace) -> tuple[Any, hardware.Link | None]:
    """The device of ``--device FILE`` (with its measured p2p link, or ``None``) or of ``--gpu``; ``--mfu`` applies."""
    if getattr(args, "device", None):
        loaded = read_device(args.device)
        device = loaded.device if args.mfu is None else replace(loaded.device, achievable_fraction=args.mfu)
        return device, loaded.p2p
    return hardware.device(args.gpu, achievable_fraction=args.mfu), None


def uses_spec(args: argparse.Namespace) -> bool:
    """Whether the arguments name a preset or a spec file."""
    return bool(getattr(args, "preset", None) or getattr(args, "spec", None))


def spec_from_args(args: argparse.Namespace) -> ModelSpec:
    """The :class:`ModelSpec` of ``--preset`` or ``--spec``, with ``--freeze``/``--unfreeze`` applied.

    ``args.mix_shape`` (set by ``--mix``, :mod:`pipeplan.cli._mix_model`): a ``--spec`` file
    rebuilt at that sample shape (:func:`pipeplan.batches.spec_shapes.reshape_spec`).
    """
    if args.preset and args.spec:
        raise InvalidInputError("give either --preset or --spec, not both")
    if not (args.preset or args.spec):
        raise InvalidInputError(f"give --preset (one of {', '.join(presets.names())}) or --spec FILE")
    if getattr(args, "sequence_parallel", None) == "on" and args.tp == 1:  # "off" at tp 1 is no claim
        raise InvalidInputError("--sequence-parallel does not apply without --tp > 1 "
                                "(it splits the norms and dropouts across tensor-parallel ranks)")
    shape = shape_from_args(args)
    try:
        spec = presets.get(args.preset, **shape) if args.preset else ModelSpec.from_file(args.spec)
    except InvalidInputError as error:  # a builder's own rule (pi0-fast: text_tokens >= 2): say the flags
        message = str(error)
        for key in shape:
            message = re.sub(rf"(?<![\w-]){key}\b", _flag(key), message)
        raise InvalidInputError(message) from None
    mix_shape = getattr(args, "mix_shape", None)  # --mix with --spec: one mix row's shape (cli/_mix_model.py)
    if mix_shape and args.spec:
        from ..batches.spec_shapes import reshape_spec

        spec = reshape_spec(spec, mix_shape)
    flags: dict[str, bool] = {}
    for option, value in (("freeze", True), ("unfreeze", False)):
        for name in _module_names(option, getattr(args, option)):
            if flags.get(name, value) != value:
                raise InvalidInputError(f"module {name!r} is given to both --freeze and --unfreeze; pick one")
            flags[name] = value
    return spec.with_frozen(flags) if flags else spec


def _module_names(option: str, text: str | None) -> list[str]:
    """The comma-separated module names of ``--freeze``/``--unfreeze``; an empty entry is refused."""
    if text is None:
        return []
    names = [part.strip() for part in text.split(",")]
    for index, name in enumerate(names):
        if not name:
            raise InvalidInputError(
                f"--{option}[{index}] is empty in {text!r} ({len(names)} entries, from 0); "
                "give module names separated by commas, like vision,llm"
            )
    return names


def profile_from_spec_args(args: argparse.Namespace) -> LayerProfile:
    """The layer profile (ms per microbatch) the spec arguments describe, priced as ``plan`` prices it.

    :func:`~pipeplan.cli._engine_args.spec_workload`: the kernels and, at ``--tp > 1``,
    the tensor-parallel collectives of each layer under the knobs given.
    """
    spec = spec_from_args(args)
    device, link = device_from_args(args)
    return spec_workload(args, spec, device, link).profile(args.micro_batch_size)


def human_count(value: float) -> str:
    """``3.24e9`` → ``"3.24B"``."""
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def defaults_assumption(args: argparse.Namespace, spec: ModelSpec | None = None) -> dict[str, str]:
    """``{"model defaults": ...}``: the cost-changing defaults a ``--spec`` file left out; ``{}`` otherwise.

    ``spec``: the spec already built from ``args`` (default: build it again).
    """
    from ..models.schema_docs import model_defaults

    if not getattr(args, "spec", None):
        return {}
    text = model_defaults(spec if spec is not None else spec_from_args(args))
    return {"model defaults": text} if text else {}

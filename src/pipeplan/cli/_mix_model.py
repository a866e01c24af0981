"""The model of ``--mix`` at each of the mix's shapes, for ``plan`` and ``simulate``: a preset or a spec file.

    check_mix_model(args, mix)              # one line, exit 2: a field the model lacks, or a --profile
    spec = spec_from_args(mix_namespace(args, {"cameras": 1}))   # the model as given, at that shape

A preset takes a row's fields as its shape options (``--cameras`` ...); a ``--spec``
file is rebuilt at the row's shape by :func:`pipeplan.batches.spec_shapes.reshape_spec`
(``spec_from_args`` reads ``mix_shape``); a ``--profile`` holds layer times measured at
one shape and cannot answer for others, so it is refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping

from .. import presets
from ..batches.mix import Mix
from ..batches.spec_shapes import missing_field, spec_shapes
from ..errors import InvalidInputError
from ._spec_args import spec_from_args

__all__ = ["check_mix_model", "mix_namespace", "mix_model_shape"]


def mix_namespace(args: argparse.Namespace, shape: Mapping[str, int]) -> argparse.Namespace:
    """``args`` with the model at one mix row's shape (the row's fields; the rest as given)."""
    if getattr(args, "spec", None):
        return argparse.Namespace(**{**vars(args), "mix_shape": dict(shape)})
    return argparse.Namespace(**{**vars(args), **shape})


def check_mix_model(args: argparse.Namespace, mix: Mix) -> None:
    """Refuse, in one line naming the mix file, a model that cannot take every field of ``mix``.

    Raises:
        InvalidInputError: a ``--profile`` (measured at one shape, not at the mix's); a
            field the preset has no option for; a field the spec file has no module for.
    """
    if getattr(args, "profile", None):
        shapes = ", ".join(mix.label(index) for index in range(len(mix.shapes)))
        raise InvalidInputError(f"--mix {mix.source}: a --profile holds layer times measured at one sample shape, "
                                f"not at the mix's ({shapes}); give --preset or --spec to cost each shape")
    if getattr(args, "preset", None):
        allowed = presets.options(args.preset)
        for key in mix.fields:
            if key not in allowed:
                raise InvalidInputError(f"mix {mix.source}: field {key!r} is not a shape option of preset "
                                        f"{args.preset!r} (its options: {', '.join(allowed) or 'none'})")
        return
    spec = spec_from_args(args)
    for key in mix.fields:
        why = missing_field(spec, key)
        if why is not None:
            raise InvalidInputError(f"mix {mix.source}: field {key!r} is not a shape of spec {args.spec} ({why}); "
                                    f"its shape fields: {', '.join(spec_shapes(spec)) or 'none'}")


def mix_model_shape(args: argparse.Namespace) -> dict[str, int] | None:
    """The shape the model is at as given: a spec file's own (:func:`spec_shapes`), else ``None``."""
    if getattr(args, "spec", None) and not getattr(args, "preset", None):
        return spec_shapes(spec_from_args(args))
    return None

"""The model schema in words: the docs field table, ``pipeplan model --schema`` and the defaults a plan reports.

    >>> from pipeplan.models.schema_docs import schema_rows
    >>> from pipeplan.models.modules import Embedding
    >>> schema_rows(Embedding)[1]
    ('vocab_size', 'integer ≥ 1 (tokens)', 'required', 'rows of the table.')

Everything here is generated from the module dataclasses' field metadata
(:func:`pipeplan.models.modules.spec_field`, read by :func:`pipeplan.models._schema.field_specs`),
the same source the spec checks use, so the docs and the checks cannot drift
(tests/test_schema.py, tests/test_docs_tables.py). torch-free.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Mapping
from typing import Any

from ._schema import FieldSpec, field_specs
from .modules import MODULE_KINDS, CrossAttention, Linear

__all__ = ["REPORTED_MARK", "defaults_text", "model_defaults", "schema_json", "schema_markdown", "schema_rows"]

#: Marks a default in the tables that a plan's ``model defaults`` assumption lists when a spec file leaves it out.
REPORTED_MARK = "†"

#: Nested records, by how a file writes them.
NESTED: dict[str, type] = {"cross_attention": CrossAttention, "linears entry": Linear}


def type_text(spec: FieldSpec) -> str:
    """A field's type, range and unit in a few words (``integer ≥ 1 (tokens)``, ``boolean``)."""
    base = spec.base
    origin, args = typing.get_origin(base), typing.get_args(base)
    bounds = "".join(f" {sign} {value}" for sign, value in (("≥", spec.minimum), ("≤", spec.maximum))
                     if value is not None)
    unit = f" ({spec.unit})" if spec.unit else ""
    if base is bool:
        text = "boolean"
    elif base is int:
        text = f"integer{bounds}{unit}"
    elif base is str:
        text = "string"
    elif origin is typing.Literal:
        text = " or ".join(f"`{arg}`" for arg in args)
    elif base is CrossAttention:
        text = "object (cross_attention)"
    elif origin is tuple and args == (str, ...):
        text = "list of strings"
    elif origin is tuple and args == (Linear, ...):
        text = "list of linears entries"
    else:  # a fixed number of integers
        text = f"{len(args)} integers{bounds}{unit}"
    return text + (" or null" if spec.optional else "")


def default_text(spec: FieldSpec) -> str:
    """``required``, or the default as a file writes it (``†``: listed in a plan's assumptions when left out)."""
    if spec.required:
        return "required"
    return f"`{json.dumps(spec.json_default(), ensure_ascii=False)}`" + (f" {REPORTED_MARK}" if spec.reported else "")


def schema_rows(cls: type) -> list[tuple[str, str, str, str]]:
    """``(field, type, default, meaning)`` for every field of a module kind or nested record."""
    return [(spec.name, type_text(spec), default_text(spec), spec.doc) for spec in field_specs(cls)]


def _summary(cls: type) -> str:
    return (cls.__doc__ or "").strip().split("\n")[0].replace("``", "`")


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def schema_markdown() -> str:
    """Every module kind's fields as markdown tables (what docs/presets.md holds between the model-schema markers)."""
    lines = ["A spec file is `{\"name\": ..., \"description\": ..., \"modules\": [...]}`; each module is an object "
             "with its `kind` and the fields below. Booleans are JSON `true`/`false` only, integers JSON integers "
             "in the range given; anything else, or an unknown field, is one error line naming the module and the "
             f"field. {REPORTED_MARK}: a default that changes the cost by more than a few percent; when a spec "
             "file leaves it out, `pipeplan plan` lists it under `model defaults` in its assumptions and "
             "`pipeplan model` prints it. A module may instead name a Hugging Face `config.json` (`\"config\": "
             "PATH`, with `kind`, `fqn_prefix` and any field above over it), and a bare `config.json` is a spec "
             "of that model alone: docs/specs_from_configs.md."]
    sections = [(kind, cls) for kind, cls in MODULE_KINDS.items()] + list(NESTED.items())
    for kind, cls in sections:
        lines += ["", f"**`{kind}`** ({cls.__name__}): {_cell(_summary(cls))}", "",
                  "| field | type | default | meaning |", "|---|---|---|---|"]
        lines += ["| " + " | ".join([f"`{name}`", _cell(kind_), _cell(default), _cell(doc)]) + " |"
                  for name, kind_, default, doc in schema_rows(cls)]
    return "\n".join(lines)


def schema_json() -> dict[str, Any]:
    """The schema as JSON (``pipeplan model --schema --json``): per kind and nested record, its fields."""
    def entry(cls: type) -> dict[str, Any]:
        return {"class": cls.__name__, "summary": _summary(cls), "fields": [
            {"name": spec.name, "type": type_text(spec).replace("`", ""), "required": spec.required,
             **({} if spec.required else {"default": spec.json_default()}), "minimum": spec.minimum,
             "maximum": spec.maximum, "unit": spec.unit, "doc": spec.doc, "reported_when_left_out": spec.reported}
            for spec in field_specs(cls)]}
    return {"spec": {"name": "string", "description": "string", "modules": "list of module objects, each with its kind",
                     "config": "a module's Hugging Face config.json path (relative to the spec file), with kind, "
                               "fqn_prefix and fields over it (docs/specs_from_configs.md)"},
            "kinds": {kind: entry(cls) for kind, cls in MODULE_KINDS.items()},
            "nested": {name: entry(cls) for name, cls in NESTED.items()}}


def defaults_text(kinds: Mapping[str, str], defaulted: Mapping[str, tuple[str, ...]]) -> str:
    """The defaults a spec file left out that change the cost, grouped by field (empty: none).

    ``kinds``: each module's kind by name; ``defaulted``: :attr:`ModelSpec.defaulted`.
    """
    modules_of: dict[str, list[str]] = {}
    words: dict[str, str] = {}
    for module, names in defaulted.items():
        specs = {spec.name: spec for spec in field_specs(MODULE_KINDS[kinds[module]])}
        for name in names:
            modules_of.setdefault(name, []).append(module)
            words[name] = specs[name].reported
    parts = [f"{name} = {words[name]} in {', '.join(modules)}" for name, modules in modules_of.items()]
    return ("; ".join(parts) + " (left out of the spec file: give them to silence this)") if parts else ""


def model_defaults(spec: Any) -> str:
    """:func:`defaults_text` of a :class:`~pipeplan.models.spec.ModelSpec` and what its ``config.json`` files left
    out (:attr:`~pipeplan.models.spec.ModelSpec.assumed`); empty for a preset or a spec built in Python."""
    parts = [defaults_text({module.name: module.kind for module in spec.modules}, spec.defaulted)]
    assumed = getattr(spec, "assumed", ())
    parts += [f"from config.json: {'; '.join(assumed)}"] if assumed else []
    return "; ".join(part for part in parts if part)

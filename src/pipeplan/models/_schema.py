"""A :class:`~pipeplan.models.spec.ModelSpec`'s file schema: the fields, their checks, module records to and from dicts.

    >>> from pipeplan.models._schema import module_record, modules_from_payload
    >>> from pipeplan.models.modules import Embedding
    >>> record = module_record(Embedding(name="tokens", vocab_size=32000, hidden_size=2048, tokens=256))
    >>> record
    {'kind': 'embedding', 'name': 'tokens', 'vocab_size': 32000, 'hidden_size': 2048, 'tokens': 256}
    >>> modules_from_payload({"name": "m", "modules": [record]})
    (Embedding(name='tokens', vocab_size=32000, hidden_size=2048, tokens=256, ...),)

The schema is generated from the module dataclasses of :mod:`pipeplan.models.modules`: each
field's annotation is its type, its metadata (:func:`~pipeplan.models.modules.spec_field`) its
range, unit, meaning and whether leaving it out is reported (:func:`field_specs`). A file is
``{"name", "description", "modules": [record, ...]}``, each record a module's ``kind`` (a key of
:data:`~pipeplan.models.modules.MODULE_KINDS`) and its fields. Checks are strict: a boolean is
JSON ``true``/``false`` only (never ``"false"``, ``"yes"`` or ``0``), an integer is a JSON integer
in its range (never ``"4096"`` or ``4.0``), an unknown key is refused with its close matches.
Every error is one line naming the record (``modules[2] (llm)``), the field and what is allowed.
:func:`check_module` (run by ``ModelSpec`` on construction) applies the same field checks to modules
built in Python, then the checks across fields. torch-free.
"""

from __future__ import annotations

import difflib
import json
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, dataclass, fields
from pathlib import Path
from typing import Any

from .._files import read_text
from ..errors import InvalidInputError
from .modules import (
    MODULE_KINDS,
    ROLES,
    CrossAttention,
    Linear,
    Module,
    Projector,
    TransformerStack,
    VisionEncoder,
)

__all__ = ["FieldSpec", "check_module", "field_specs", "module_from_record", "module_record",
           "modules_from_payload", "read_payload", "reported_defaults"]


@dataclass(frozen=True)
class FieldSpec:
    """One field of a module kind as the schema states it (from the dataclass field and its metadata).

    ``base`` is the annotation without ``None``; ``optional``: ``null`` is allowed.
    """

    name: str
    base: Any
    optional: bool
    required: bool
    default: Any
    minimum: int | None
    maximum: int | None
    unit: str
    doc: str
    reported: str

    def expects(self) -> str:
        """What a value must be, in words (``an integer >= 1``, ``true or false``), for messages and docs."""
        text = _expects(self.base, self.minimum, self.maximum)
        return text + (" or null" if self.optional else "")

    def json_default(self) -> Any:
        """The default as a file writes it (``None`` → ``null``; a tuple → a list)."""
        return _to_json(self.default)


_SPECS: dict[type, tuple[FieldSpec, ...]] = {}


def field_specs(cls: type) -> tuple[FieldSpec, ...]:
    """The schema of a module kind (or of :class:`CrossAttention` / :class:`Linear`), in field order."""
    if cls not in _SPECS:
        _SPECS[cls] = _read_specs(cls)
    return _SPECS[cls]


def _read_specs(cls: type) -> tuple[FieldSpec, ...]:
    hints = typing.get_type_hints(cls)
    specs = []
    for item in fields(cls):
        base, optional = _strip_none(hints[item.name])
        meta = item.metadata
        specs.append(FieldSpec(
            name=item.name, base=base, optional=optional, required=item.default is MISSING,
            default=None if item.default is MISSING else item.default, minimum=meta.get("min"),
            maximum=meta.get("max"), unit=meta.get("unit", ""), doc=meta.get("doc", ""),
            reported=meta.get("reported", ""),
        ))
    return tuple(specs)


def _strip_none(annotation: Any) -> tuple[Any, bool]:
    """``(annotation without None, whether None is allowed)``."""
    if typing.get_origin(annotation) in (typing.Union, types.UnionType):
        args = [arg for arg in typing.get_args(annotation) if arg is not type(None)]
        if len(args) != len(typing.get_args(annotation)):
            return (args[0] if len(args) == 1 else typing.Union[tuple(args)]), True
    return annotation, False


def _bound_text(minimum: int | None, maximum: int | None) -> str:
    parts = ([f">= {minimum}"] if minimum is not None else []) + ([f"<= {maximum}"] if maximum is not None else [])
    return (" " + " and ".join(parts)) if parts else ""


def _expects(base: Any, minimum: int | None, maximum: int | None) -> str:
    origin, args = typing.get_origin(base), typing.get_args(base)
    if base is bool:
        return "true or false (a JSON boolean)"
    if base is int:
        return "an integer" + _bound_text(minimum, maximum)
    if base is str:
        return "a non-empty string"
    if origin is typing.Literal:
        return "one of " + ", ".join(str(arg) for arg in args)
    if base is CrossAttention:
        return "an object {source, every, kv_hidden_size}"
    if origin is tuple and args == (str, ...):
        return "a list of strings"
    if origin is tuple and args == (Linear, ...):
        return "a non-empty list of [in_features, out_features] or [in_features, out_features, tokens]"
    if origin is tuple and all(arg is int for arg in args):
        return f"{len(args)} integers" + _bound_text(minimum, maximum)
    raise TypeError(f"no schema rule for {base!r}")  # a new annotation needs a rule here


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _fail(where: str, spec: FieldSpec, value: Any) -> InvalidInputError:
    return InvalidInputError(f"{where}.{spec.name} must be {spec.expects()}, got {value!r}")


def _in_range(value: int, spec: FieldSpec) -> bool:
    return (spec.minimum is None or value >= spec.minimum) and (spec.maximum is None or value <= spec.maximum)


def check_field(spec: FieldSpec, value: Any, where: str) -> None:
    """Raise :class:`InvalidInputError` (``{where}.{field} must be ..., got ...``) unless ``value`` fits ``spec``.

    Takes a file's values (lists, objects) and Python's (tuples, :class:`CrossAttention`, :class:`Linear`).
    """
    if value is None:
        if spec.optional:
            return
        raise _fail(where, spec, value)
    base = spec.base
    origin, args = typing.get_origin(base), typing.get_args(base)
    if base is bool:
        ok = value is True or value is False
    elif base is int:
        ok = _is_int(value) and _in_range(value, spec)
    elif base is str:
        ok = isinstance(value, str) and bool(value)
    elif origin is typing.Literal:
        ok = isinstance(value, str) and value in args
    elif base is CrossAttention:
        _check_object(CrossAttention, value, f"{where}.{spec.name}")
        return
    elif origin is tuple and args == (Linear, ...):
        ok = isinstance(value, (list, tuple)) and bool(value)
        if ok:
            for index, layer in enumerate(value):
                _check_linear(layer, f"{where}.{spec.name}[{index}]")
    elif origin is tuple and args == (str, ...):
        ok = isinstance(value, (list, tuple)) and all(isinstance(item, str) for item in value)
    elif origin is tuple:  # a fixed number of integers
        ok = (isinstance(value, (list, tuple)) and len(value) == len(args)
              and all(_is_int(item) and _in_range(item, spec) for item in value))
    else:
        raise TypeError(f"no schema rule for {base!r}")
    if not ok:
        raise _fail(where, spec, value)


def _check_object(cls: type, value: Any, where: str) -> None:
    """A nested record (``cross_attention``): an instance of ``cls`` or an object with its keys."""
    specs = field_specs(cls)
    if isinstance(value, cls):
        for spec in specs:
            check_field(spec, getattr(value, spec.name), where)
        return
    if not isinstance(value, Mapping):
        raise InvalidInputError(f"{where} must be an object with {', '.join(s.name for s in specs)}, got {value!r}")
    _check_keys(value, specs, where)
    for spec in specs:
        if spec.name in value:
            check_field(spec, value[spec.name], where)


def _check_linear(layer: Any, where: str) -> None:
    """One ``linears`` entry: a :class:`Linear` or ``[in_features, out_features(, tokens)]``."""
    specs = field_specs(Linear)
    if isinstance(layer, Linear):
        values = [getattr(layer, spec.name) for spec in specs]
    elif isinstance(layer, (list, tuple)) and 2 <= len(layer) <= 3:
        values = list(layer) + [None] * (3 - len(layer))
    else:
        raise InvalidInputError(f"{where} must be [in_features, out_features] or [in_features, out_features, "
                                f"tokens], got {layer!r}")
    for spec, value in zip(specs, values):
        check_field(spec, value, where)


def _check_keys(record: Mapping[str, Any], specs: Sequence[FieldSpec], where: str, extra: tuple[str, ...] = ()) -> None:
    """Unknown keys (with their close matches) and missing required ones."""
    names = [spec.name for spec in specs]
    unknown = sorted(str(key) for key in record if key not in names and key not in extra)
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(key, names, n=2, cutoff=0.6)
            if close:
                hints.append(f"{key!r}: did you mean {' or '.join(repr(c) for c in close)}?")
        listed = ("pipeplan model --schema lists every field" if len(hints) == len(unknown)
                  else f"allowed: {', '.join(names)}")
        hint = f" ({'; '.join(hints)})" if hints else ""
        raise InvalidInputError(f"{where} has unknown keys {unknown}{hint}; {listed}")
    missing = [spec.name for spec in specs if spec.required and spec.name not in record]
    if missing:
        raise InvalidInputError(f"{where} lacks {', '.join(missing)}")


def _to_json(value: Any) -> Any:
    if isinstance(value, CrossAttention):
        return {spec.name: _to_json(getattr(value, spec.name)) for spec in field_specs(CrossAttention)}
    if isinstance(value, Linear):
        return [value.in_features, value.out_features] + ([value.tokens] if value.tokens else [])
    if isinstance(value, tuple):
        return [_to_json(item) for item in value]
    return value


def _from_json(spec: FieldSpec, value: Any) -> Any:
    """A checked file value as the dataclass holds it (lists → tuples, objects → records)."""
    if value is None:
        return None
    if spec.base is CrossAttention:
        return value if isinstance(value, CrossAttention) else CrossAttention(**value)
    if typing.get_origin(spec.base) is tuple:
        if typing.get_args(spec.base) == (Linear, ...):
            return tuple(layer if isinstance(layer, Linear) else Linear(*layer) for layer in value)
        return tuple(value)
    return value


def module_record(module: Module) -> dict[str, Any]:
    """One module as a JSON-ready record: its ``kind`` and every field that differs from its default."""
    record: dict[str, Any] = {"kind": module.kind}
    for spec in field_specs(type(module)):
        value = getattr(module, spec.name)
        if not spec.required and value == spec.default:
            continue
        record[spec.name] = _to_json(value)
    return record


def modules_from_payload(payload: Any) -> tuple[Module, ...]:
    """The modules of a spec payload (:meth:`ModelSpec.from_dict`'s schema), checked key by key."""
    if not isinstance(payload, Mapping) or "modules" not in payload:
        raise InvalidInputError("a model spec must be an object with 'name' and 'modules'")
    unknown = set(payload) - {"name", "description", "modules"}
    if unknown:
        raise InvalidInputError(f"a model spec has unknown keys {sorted(unknown)}; allowed: name, description, modules")
    for key in ("name", "description"):
        if key in payload and not isinstance(payload[key], str):
            raise InvalidInputError(f"a model spec's {key} must be a string, got {payload[key]!r}")
    raw = payload["modules"]
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
        raise InvalidInputError("modules must be a non-empty list of objects")
    return tuple(module_from_record(record, position) for position, record in enumerate(raw))


def reported_defaults(payload: Mapping[str, Any]) -> dict[str, tuple[str, ...]]:
    """Per module name, the fields a (checked) payload leaves out whose default is reported (``FieldSpec.reported``)."""
    left: dict[str, tuple[str, ...]] = {}
    for record in payload["modules"]:
        names = tuple(spec.name for spec in field_specs(MODULE_KINDS[record["kind"]])
                      if spec.reported and spec.name not in record)
        if names:
            left[record["name"]] = names
    return left


def read_payload(file: Path) -> Any:
    """The parsed text of a ``.json`` (or, with PyYAML, ``.yaml`` / ``.yml``) spec file."""
    suffix = file.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise InvalidInputError(f"spec file must end in .json, .yaml or .yml, got {str(file)!r}")
    text = read_text(file, "spec file")  # names the real reason: missing, a directory, empty, not UTF-8
    if suffix == ".json":
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"spec file {str(file)!r} is not valid JSON: {error}") from None
    else:
        try:
            import yaml  # type: ignore[import-untyped]
        except ImportError:
            raise InvalidInputError(
                f"spec file {str(file)!r} is YAML, which needs PyYAML (pip install pyyaml); or use .json"
            ) from None
        try:
            payload = yaml.safe_load(text)
        except yaml.YAMLError as error:
            raise InvalidInputError(f"spec file {str(file)!r} is not valid YAML: {error}") from None
    return payload


def module_from_record(record: Any, position: int) -> Module:
    """The module of one record of a spec's ``modules`` list (``position``: its index, for messages).

    Every field is checked against the schema here (so a message can name the module before it is
    built); :func:`check_module` then checks across fields.
    """
    where = f"modules[{position}]"
    if not isinstance(record, Mapping):
        raise InvalidInputError(f"{where} must be an object, got {record!r}")
    kind = record.get("kind")
    if kind not in MODULE_KINDS:
        raise InvalidInputError(f"{where}.kind must be one of {', '.join(MODULE_KINDS)}, got {kind!r}")
    cls = MODULE_KINDS[kind]
    specs = field_specs(cls)
    name = record.get("name")
    label = f"{where} ({name})" if isinstance(name, str) and name else f"{where} ({kind})"
    _check_keys(record, specs, label, extra=("kind",))
    values = {}
    for spec in specs:
        if spec.name in record:
            check_field(spec, record[spec.name], label)
            values[spec.name] = _from_json(spec, record[spec.name])
    return typing.cast(Module, cls(**values))


def check_module(module: Any, position: int) -> None:
    """Raise :class:`~pipeplan.errors.InvalidInputError` naming the field of ``module`` that is bad."""
    if not isinstance(module, tuple(MODULE_KINDS.values())):
        raise InvalidInputError(f"modules[{position}] must be a module (one of {', '.join(MODULE_KINDS)}), got {module!r}")
    label = getattr(module, "name", None)
    if not isinstance(label, str) or not label:
        raise InvalidInputError(f"modules[{position}].name must be a non-empty string, got {label!r}")
    where = f"modules[{position}] ({label})"
    for spec in field_specs(type(module)):
        check_field(spec, getattr(module, spec.name), where)
    if isinstance(module, (TransformerStack, VisionEncoder)):
        heads = module.num_heads
        head_dim = getattr(module, "head_dim", None)
        if head_dim is None and module.hidden_size % heads:
            raise InvalidInputError(
                f"{where}.num_heads = {heads} must divide hidden_size = {module.hidden_size} "
                "(or give head_dim)"
            )
        kv = getattr(module, "num_kv_heads", None)
        if kv is not None and heads % kv:
            raise InvalidInputError(f"{where}.num_kv_heads = {kv} must divide num_heads = {heads}")
    if isinstance(module, VisionEncoder) and module.image_size % module.patch_size:
        raise InvalidInputError(
            f"{where}.image_size = {module.image_size} must be a multiple of patch_size = {module.patch_size}"
        )
    _check_paths(module, where)
def _check_paths(module: Any, where: str) -> None:
    """The reference paths (``fqn``, ``fqn_first``, ``fqn_last``) and ``role`` of a module."""
    repeated = isinstance(module, (TransformerStack, VisionEncoder))
    for key in ("fqn", "fqn_first", "fqn_last"):
        paths = getattr(module, key, None)
        if paths is None:
            continue
        if key != "fqn" and module.fqn is None:
            raise InvalidInputError(f"{where}.{key} needs fqn (the paths of the blocks)")
        if isinstance(paths, (str, bytes)) or not isinstance(paths, tuple) or not paths:
            raise InvalidInputError(f"{where}.{key} must be a non-empty list of module paths, got {paths!r}")
        templated = repeated and key == "fqn" and module.num_layers > 1  # one block may name itself
        for path in paths:
            if not isinstance(path, str) or not path or path != path.strip():
                raise InvalidInputError(f"{where}.{key} entries must be non-empty module paths, got {path!r}")
            try:
                named = path.format(i=0)
            except (KeyError, IndexError, ValueError):
                named = None
            if named is None or (templated and "{i}" not in path) or (not repeated and named != path):
                need = "a template with {i} (the block index)" if templated else "a module path without braces"
                raise InvalidInputError(f"{where}.{key} entry {path!r} must be {need}")
    role = module.role
    if role is not None:
        if role not in ROLES:
            raise InvalidInputError(f"{where}.role must be one of {', '.join(ROLES)}, got {role!r}")
        if module.fqn is None:
            raise InvalidInputError(f"{where}.role needs fqn (the module paths it describes)")

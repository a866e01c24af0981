"""A :class:`~pipeplan.models.spec.ModelSpec`'s file schema: module records to and from dicts, field checks, files.

    >>> from pipeplan.models._schema import module_record, modules_from_payload
    >>> from pipeplan.models.modules import Embedding
    >>> record = module_record(Embedding(name="tokens", vocab_size=32000, hidden_size=2048, tokens=256))
    >>> record
    {'kind': 'embedding', 'name': 'tokens', 'vocab_size': 32000, 'hidden_size': 2048, 'tokens': 256}
    >>> modules_from_payload({"name": "m", "modules": [record]})
    (Embedding(name='tokens', vocab_size=32000, hidden_size=2048, tokens=256, ...),)

The schema (documented in docs/presets.md): ``{"name", "description", "modules": [record, ...]}``,
each record a module's ``kind`` (a key of :data:`~pipeplan.models.modules.MODULE_KINDS`) and
the fields that differ from their defaults. Every loader error names the record
(``modules[2] (vision)``), the field and what is allowed. The loaders check the keys;
:func:`check_module` (run by ``ModelSpec`` on construction) checks the values. torch-free.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

from .._files import read_text
from ..errors import InvalidInputError
from .modules import (
    MODULE_KINDS,
    NORM_PARAMS,
    ROLES,
    CrossAttention,
    Linear,
    Module,
    Projector,
    TransformerStack,
    VisionEncoder,
)

__all__ = ["check_module", "module_from_record", "module_record", "modules_from_payload", "read_payload"]


def module_record(module: Module) -> dict[str, Any]:
    """One module as a JSON-ready record: its ``kind`` and every field that differs from its default."""
    record: dict[str, Any] = {"kind": module.kind}
    for item in fields(module):
        value = getattr(module, item.name)
        default = item.default
        if value == default:
            continue
        if isinstance(value, CrossAttention):
            value = {k.name: getattr(value, k.name) for k in fields(value)}
        elif isinstance(value, tuple) and value and isinstance(value[0], Linear):
            value = [[layer.in_features, layer.out_features] + ([layer.tokens] if layer.tokens else [])
                     for layer in value]
        elif isinstance(value, tuple):
            value = list(value)
        record[item.name] = value
    return record


def modules_from_payload(payload: Any) -> tuple[Module, ...]:
    """The modules of a spec payload (:meth:`ModelSpec.from_dict`'s schema), checked key by key."""
    if not isinstance(payload, Mapping) or "modules" not in payload:
        raise InvalidInputError("a model spec must be an object with 'name' and 'modules'")
    unknown = set(payload) - {"name", "description", "modules"}
    if unknown:
        raise InvalidInputError(f"a model spec has unknown keys {sorted(unknown)}; allowed: name, description, modules")
    raw = payload["modules"]
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not raw:
        raise InvalidInputError("modules must be a non-empty list of objects")
    return tuple(module_from_record(record, position) for position, record in enumerate(raw))


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
    """The module of one record of a spec's ``modules`` list (``position``: its index, for messages)."""
    where = f"modules[{position}]"
    if not isinstance(record, Mapping):
        raise InvalidInputError(f"{where} must be an object, got {record!r}")
    kind = record.get("kind")
    if kind not in MODULE_KINDS:
        raise InvalidInputError(f"{where}.kind must be one of {', '.join(MODULE_KINDS)}, got {kind!r}")
    cls = MODULE_KINDS[kind]
    names = {item.name for item in fields(cls)}
    unknown = set(record) - names - {"kind"}
    if unknown:
        raise InvalidInputError(f"{where} ({kind}) has unknown keys {sorted(unknown)}; allowed: {', '.join(sorted(names))}")
    required = [item.name for item in fields(cls)
                if item.default is MISSING and item.default_factory is MISSING and item.name not in record]
    if required:
        raise InvalidInputError(f"{where} ({kind}) lacks {', '.join(required)}")
    values = {key: value for key, value in record.items() if key != "kind"}
    if "cross_attention" in values and values["cross_attention"] is not None:
        cross = values["cross_attention"]
        if not isinstance(cross, Mapping) or "source" not in cross:
            raise InvalidInputError(f"{where}.cross_attention must be an object with a 'source'")
        values["cross_attention"] = CrossAttention(**{k: cross[k] for k in cross if k in ("source", "every", "kv_hidden_size")})
    if "linears" in values:
        try:
            values["linears"] = tuple(Linear(*[int(x) for x in item]) for item in values["linears"])
        except (TypeError, ValueError):
            raise InvalidInputError(f"{where}.linears must be a list of [in_features, out_features(, tokens)]") from None
    for key in ("inputs", "adaptive_norm", "fqn", "fqn_first", "fqn_last"):
        if key in values and values[key] is not None:
            if isinstance(values[key], (str, bytes)) or not isinstance(values[key], Sequence):
                raise InvalidInputError(f"{where}.{key} must be a list, got {values[key]!r}")
            values[key] = tuple(values[key])
    return cls(**values)


_INT_FIELDS = ("num_layers", "hidden_size", "num_heads", "seq_length", "ffn_hidden_size", "image_size",
               "patch_size", "cameras", "frames", "channels", "vocab_size", "tokens", "repeats", "sequences")
_OPTIONAL_INT_FIELDS = ("num_kv_heads", "head_dim", "output_tokens", "output_width", "position_tokens")
_NON_NEGATIVE_FIELDS = ("extra_tokens", "norm_params", "extra_params", "position_tokens")


def check_module(module: Any, position: int) -> None:
    """Raise :class:`~pipeplan.errors.InvalidInputError` naming the field of ``module`` that is bad."""
    if not isinstance(module, tuple(MODULE_KINDS.values())):
        raise InvalidInputError(f"modules[{position}] must be a module (one of {', '.join(MODULE_KINDS)}), got {module!r}")
    label = getattr(module, "name", None)
    if not isinstance(label, str) or not label:
        raise InvalidInputError(f"modules[{position}].name must be a non-empty string, got {label!r}")
    where = f"modules[{position}] ({label})"
    for key in _INT_FIELDS + _OPTIONAL_INT_FIELDS + _NON_NEGATIVE_FIELDS:
        if not hasattr(module, key):
            continue
        value = getattr(module, key)
        if value is None and key in _OPTIONAL_INT_FIELDS:
            continue
        minimum = 0 if key in _NON_NEGATIVE_FIELDS else 1
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidInputError(f"{where}.{key} must be an integer >= {minimum}, got {value!r}")
    if hasattr(module, "norm") and module.norm not in NORM_PARAMS:
        raise InvalidInputError(f"{where}.norm must be one of {', '.join(NORM_PARAMS)}, got {module.norm!r}")
    if hasattr(module, "attention") and module.attention not in ("eager", "flash"):
        raise InvalidInputError(f"{where}.attention must be 'eager' or 'flash', got {module.attention!r}")
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
    if isinstance(module, TransformerStack):
        ada = module.adaptive_norm
        if len(ada) != 2 or any(isinstance(k, bool) or not isinstance(k, int) or k < 0 for k in ada):
            raise InvalidInputError(f"{where}.adaptive_norm must be two integers >= 0, got {ada!r}")
        cross = module.cross_attention
        if cross is not None:
            if isinstance(cross.every, bool) or not isinstance(cross.every, int) or cross.every < 1:
                raise InvalidInputError(f"{where}.cross_attention.every must be an integer >= 1, got {cross.every!r}")
            kv_width = cross.kv_hidden_size
            if kv_width is not None and (isinstance(kv_width, bool) or not isinstance(kv_width, int) or kv_width < 1):
                raise InvalidInputError(f"{where}.cross_attention.kv_hidden_size must be an integer >= 1, got {kv_width!r}")
    if isinstance(module, Projector):
        if not module.linears:
            raise InvalidInputError(f"{where}.linears must list at least one linear layer")
        for index, layer in enumerate(module.linears):
            for key in ("in_features", "out_features"):
                value = getattr(layer, key)
                if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                    raise InvalidInputError(f"{where}.linears[{index}].{key} must be an integer >= 1, got {value!r}")
    for key in ("frozen",):
        if not isinstance(getattr(module, key), bool):
            raise InvalidInputError(f"{where}.{key} must be true or false, got {getattr(module, key)!r}")
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

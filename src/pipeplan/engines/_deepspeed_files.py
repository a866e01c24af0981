"""The files the DeepSpeed reader opens: ``ds_config.json`` as DeepSpeed parses it, and the export's Python literals.

    from pathlib import Path
    from pipeplan.engines._deepspeed_files import _literals, _load, _parse_python
    _load(Path("ds_config.json"))                              # the JSON object; a key set twice is refused
    _literals(_parse_python(Path("out/pipeline_module.py")))   # {'PIPEPLAN_PARTS': [0, 13, 24], ...}

A file of another kind (a torchtitan TOML or Python config, a Megatron-LM launch line,
a pipeplan model spec) is refused in one line naming the option that takes it. The export's
Python files are read with :mod:`ast`, never run: only module-level ``NAME = <literal>``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ._deepspeed_keys import _BATCH

def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key set twice (DeepSpeed's ``dict_raise_error_on_duplicate_keys``)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise InvalidInputError(f"key {key!r} is set twice (DeepSpeed refuses duplicate keys)")
        result[key] = value
    return result


def _load(file: Path) -> dict[str, Any]:
    """The JSON object in ``file``; a file of another kind gets one line naming the option that takes it."""
    try:
        text = file.read_text()
    except UnicodeDecodeError:
        raise InvalidInputError(f"{file}: not a text file, so no DeepSpeed config (a ds_config.json)") from None
    try:
        payload = json.loads(text, object_pairs_hook=_no_duplicates)
    except InvalidInputError as error:
        raise InvalidInputError(f"{file}: {error}") from None
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"{file}: {_other_kind(text) or f'not JSON ({error})'}") from None
    if not isinstance(payload, dict):
        raise InvalidInputError(f"{file}: a DeepSpeed config is a JSON object, got {type(payload).__name__}")
    if isinstance(payload.get("modules"), list) and not any(key in payload for key in _BATCH):
        raise InvalidInputError(f"{file} looks like a pipeplan model spec (its \"modules\" list), not a DeepSpeed "
                                "config: give it to --spec")
    return payload


def _other_kind(text: str) -> str:
    """What a non-JSON ``text`` looks like and the option that takes it (``""``: nothing known)."""
    tables = re.findall(r"^\s*\[([A-Za-z_][\w.]*)\]\s*$", text, re.MULTILINE)
    if tables and re.search(r"^\s*[\w.-]+\s*=", text, re.MULTILINE):
        shown = ", ".join(f"[{table}]" for table in dict.fromkeys(tables))
        return (f"looks like a TOML config ({shown}), not a DeepSpeed ds_config.json: a torchtitan config "
                "goes to --torchtitan-config")
    if "torchtitan" in text or "Trainer.Config" in text:
        return "looks like a torchtitan config, not a DeepSpeed ds_config.json: give it to --torchtitan-config"
    flags = ("--num-layers", "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
             "--global-batch-size", "--hidden-size")
    if any(flag in text for flag in flags):
        return ("looks like a Megatron-LM launch line (its --flags), not a DeepSpeed ds_config.json: give it to "
                "--megatron-args")
    return ""


def _parse_python(file: Path) -> ast.Module:
    try:
        return ast.parse(file.read_text(), filename=str(file))
    except (SyntaxError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{file}: not valid python ({error})") from None


def _literals(module: ast.Module) -> dict[str, Any]:
    """The module-level ``NAME = <literal>`` assignments of ``module`` (the export's machine-readable facts)."""
    found: dict[str, Any] = {}
    for node in module.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                found[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return found

"""A torchtitan Python config's settings, read with :mod:`ast` (never run): literals only.

    import ast
    from pathlib import Path
    from pipeplan.engines._torchtitan_python import _python_values
    tree = ast.parse("def cfg():\\n    return Trainer.Config(\\n"
                     "        parallelism=ParallelismConfig(tensor_parallel_degree=2))\\n")
    _python_values(Path("cfg.py"), tree, [], set())
    # {'parallelism.tensor_parallel_degree': (2, 'cfg.py: ParallelismConfig(tensor_parallel_degree) = 2')}

Read: pipeplan's own export (``PARALLELISM = {...}``, ``MICRO_BATCH_SIZE``, ...), and a
user's config function for torchtitan 0.3.0 or HEAD: the literal keywords of
``ParallelismConfig(...)`` / ``TrainingConfig(...)`` / ``CompileConfig(...)``, assignments
``config.parallelism.KEY = ...``, and ``activation_checkpoint`` set to ``FullAC.Config()``,
``SelectiveAC.Config()`` or ``None``. A value that is no literal is not read (one note
names it); a near miss of a field pipeplan knows is refused.
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ._torchtitan_keys import _CONFIG_CLASSES, IGNORED_KEYS, PYTHON_KEYS, TOML_KEYS, Values, _near_miss, _type_ok

def _literal(node: ast.expr) -> tuple[bool, Any]:
    try:
        return True, ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return False, None


def _dotted(node: ast.expr) -> list[str]:
    """``config.parallelism.tensor_parallel_degree`` → ``["config", "parallelism", "tensor_parallel_degree"]``."""
    names: list[str] = []
    while isinstance(node, ast.Attribute):
        names.insert(0, node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.insert(0, node.id)
    return names


def _ac_mode(node: ast.expr) -> str | None:
    """``None`` / ``FullAC.Config()`` / ``SelectiveAC.Config()`` → ``"none"`` / ``"full"`` / ``"selective"``."""
    if isinstance(node, ast.Constant) and node.value is None:
        return "none"
    if isinstance(node, ast.Call):
        names = _dotted(node.func)
        if "FullAC" in names:
            return "full"
        if "SelectiveAC" in names:
            return "selective"
    return None


def _python_values(path: Path, tree: ast.Module, unread: list[str], unknown: set[str]) -> Values:
    """What a Python config sets, literals only (``unread``: what it sets that is no literal; ``unknown``:
    the keys of ``ParallelismConfig`` / ``TrainingConfig`` it sets that pipeplan does not know)."""
    name = path.name
    literals = {node.targets[0].id: node.value for node in tree.body
                if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name)}
    values: Values = {}

    def put(key: str, node: ast.expr, shown: str) -> None:
        section, field_name = key.split(".", 1)
        known = key in TOML_KEYS or key in PYTHON_KEYS or key in IGNORED_KEYS
        if section in _CONFIG_CLASSES.values() and not known:
            close = _near_miss(section, field_name, (*TOML_KEYS, *PYTHON_KEYS, *IGNORED_KEYS))
            if close is not None:
                raise InvalidInputError(f"{name} line {node.lineno}: {field_name!r} is not a field of torchtitan's "
                                        f"{section} config pipeplan knows (did you mean {close}?)")
            unknown.add(key)
        ok, value = _literal(node)
        if not ok:
            unread.append(f"{shown} = {ast.unparse(node)} (line {node.lineno}) is no literal: not read")
            return
        expected = TOML_KEYS[key][0] if key in TOML_KEYS else PYTHON_KEYS.get(key)
        if expected is not None and not _type_ok(expected, value):
            raise InvalidInputError(f"{name} line {node.lineno}: {shown} = {ast.unparse(node)} is not {expected}")
        values[key] = (value, f"{name}: {shown} = {ast.unparse(node)}")

    if isinstance(literals.get("PARALLELISM"), ast.Dict):  # pipeplan's own export
        table = literals["PARALLELISM"]
        assert isinstance(table, ast.Dict)
        for key_node, value_node in zip(table.keys, table.values):
            if isinstance(key_node, ast.Constant) and isinstance(key_node.value, str):
                put(f"parallelism.{key_node.value}", value_node, f"PARALLELISM[{key_node.value!r}]")
        for constant, key in (("MICRO_BATCH_SIZE", "parallelism.pipeline_parallel_microbatch_size"),
                              ("LOCAL_BATCH_SIZE", "training.local_batch_size"),
                              ("GLOBAL_BATCH_SIZE", "training.global_batch_size"),
                              ("TOKENS_PER_SAMPLE", "training.seq_len"),
                              ("RECOMPUTE", "pipeplan.recompute"),
                              ("COMPILE", "compile.enable"),
                              ("ASYNC_TP", "compile.enable_async_tensor_parallel"),
                              ("COMPILE_COMPONENTS", "compile.components"),
                              ("LAYERS_PER_STAGE", "pipeplan.layers_per_stage")):
            if constant in literals and not (constant == "TOKENS_PER_SAMPLE" and _literal(literals[constant])[1] is None):
                put(key, literals[constant], constant)
        return values
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            names = _dotted(node.func)
            section = _CONFIG_CLASSES.get(names[-1] if names else "")
            for keyword in node.keywords:
                if section and keyword.arg:
                    put(f"{section}.{keyword.arg}", keyword.value, f"{names[-1]}({keyword.arg})")
                elif keyword.arg == "activation_checkpoint" and _ac_mode(keyword.value):
                    values["activation_checkpoint.mode"] = (_ac_mode(keyword.value),
                                                            f"{name}: activation_checkpoint={ast.unparse(keyword.value)}")
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = _dotted(node.targets[0])
            if len(target) >= 3 and target[-2] in _CONFIG_CLASSES.values():
                put(f"{target[-2]}.{target[-1]}", node.value, ".".join(target))
            elif target and target[-1] == "activation_checkpoint" and _ac_mode(node.value):
                values["activation_checkpoint.mode"] = (_ac_mode(node.value),
                                                        f"{name}: {'.'.join(target)} = {ast.unparse(node.value)}")
    if not values and not unread:
        raise InvalidInputError(f"{path}: no torchtitan setting found (ParallelismConfig(...), TrainingConfig(...) "
                                "or config.parallelism.KEY = ...)")
    return values

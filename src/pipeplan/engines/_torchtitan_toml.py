"""A torchtitan TOML file's keys, checked against the keys pipeplan knows, and the release's defaults.

    import tomllib
    from pathlib import Path
    from pipeplan.engines._torchtitan_toml import _toml_default, _toml_values
    unknown = set()
    _toml_values(Path("run.toml"), tomllib.loads("[parallelism]\\ntensor_parallel_degree = 2\\n"), unknown)
    # {'parallelism.tensor_parallel_degree': (2, 'run.toml: [parallelism] tensor_parallel_degree = 2')}
    _toml_default("parallelism.pipeline_parallel_degree", "run.toml")[0]   # 1

A value of the wrong type of a key pipeplan reads is refused, as is a near miss of a
known section or key, a scalar where a section belongs, and a key only the Python configs
have; any other key is added to ``unknown`` (listed as not priced).
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ._torchtitan_keys import (_NEAR_MISS_CUTOFF, _OLDER_NAMES, _SECTIONS, IGNORED_KEYS, PYTHON_KEYS, TOML_COMMIT,
                               TOML_KEYS, Values, _near_miss, _type_ok)

def _toml_values(path: Path, data: dict[str, Any], unknown: set[str], prefix: str = "") -> Values:
    """Every key ``data`` sets: ``{"section.key": (value, source)}``; a key pipeplan does not know is
    added to ``unknown`` (a near miss of one it knows is refused, as is a wrong type of one it reads)."""
    values: Values = {}
    for key, value in data.items():
        where = f"{prefix}.{key}" if prefix else key
        annotation = TOML_KEYS[where][0] if where in TOML_KEYS else _OLDER_NAMES.get(where)
        if annotation is not None:
            if isinstance(value, dict) or not _type_ok(annotation, value):
                raise InvalidInputError(f"{path}: [{prefix}] {key} = {json.dumps(value)} is not {annotation}")
        elif isinstance(value, dict):
            if not prefix and key not in _SECTIONS:
                near = difflib.get_close_matches(key, sorted(_SECTIONS), n=1, cutoff=_NEAR_MISS_CUTOFF)
                if near:
                    raise InvalidInputError(f"{path}: [{key}] is not a section pipeplan knows (did you mean "
                                            f"[{near[0]}]?)")
            values.update(_toml_values(path, value, unknown, where))
            continue
        elif not prefix and key in _SECTIONS:
            raise InvalidInputError(f"{path}: {key} must be a [{key}] section, got {json.dumps(value)}")
        elif where in PYTHON_KEYS:
            raise InvalidInputError(f"{path}: [{prefix}] {key} is a key of torchtitan's Python configs; its TOML "
                                    f"release ({TOML_COMMIT}) has none")
        elif where not in IGNORED_KEYS:
            if prefix:
                section, name = where.split(".", 1)
                close = _near_miss(section, name, (*TOML_KEYS, *IGNORED_KEYS))
                if close is not None:
                    raise InvalidInputError(f"{path}: [{prefix}] {key} is not a key pipeplan knows (did you mean "
                                            f"{close}?)")
            unknown.add(where)
        values[where] = (value, f"{path.name}: [{prefix}] {key} = {json.dumps(value)}")
    return values


def _toml_default(key: str, file: str) -> tuple[Any, str]:
    """The TOML release's default for ``section.key`` (a key of :data:`TOML_KEYS`), with a source naming it."""
    section, name = key.split(".", 1)
    return TOML_KEYS[key][1], (f"torchtitan default ({file} does not set [{section}] {name}; torchtitan "
                               f"{TOML_COMMIT} torchtitan/config/job_config.py)")

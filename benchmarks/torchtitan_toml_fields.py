"""Checks the torchtitan keys pipeplan knows against a checkout of torchtitan's last TOML release.

    python benchmarks/torchtitan_toml_fields.py TORCHTITAN_TREE

TORCHTITAN_TREE is a checkout of pytorch/torchtitan at e347b1e5e (2026-02-15, the last
release configured by TOML; ``git archive e347b1e5e torchtitan/config | tar -x``). Reads its
``torchtitan/config/job_config.py`` with ``ast`` (nothing of it runs): every ``@dataclass``
field of ``JobConfig``'s sections, its annotation as written and its literal default. Prints,
for pipeplan's own lists in ``pipeplan.engines.torchtitan_config``, every difference:

* a key of ``TOML_KEYS`` (the keys the reader prices or maps) the release lacks, or whose
  annotation or default is not the one pipeplan applies;
* a key of ``IGNORED_KEYS`` the release lacks; a key of ``PYTHON_KEYS`` the release has;
* a key of the release the reader would refuse as a near miss of a key it knows.

Exits 1 where there is a difference, 0 (and says so) where there is none. It writes nothing.
"""

from __future__ import annotations

import argparse
import ast
import sys
import tempfile
from pathlib import Path
from typing import Any

from pipeplan.engines.torchtitan_config import IGNORED_KEYS, PYTHON_KEYS, TOML_COMMIT, TOML_KEYS, read_torchtitan_config
from pipeplan.errors import InvalidInputError


def _classes(tree: ast.Module) -> dict[str, list[tuple[str, str, object]]]:
    classes: dict[str, list[tuple[str, str, object]]] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        rows = []
        for item in node.body:
            if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                value = item.value
                if (isinstance(value, ast.Call) and getattr(value.func, "id", "") == "field"
                        and value.keywords and value.keywords[0].arg == "default_factory"
                        and isinstance(value.keywords[0].value, ast.Lambda)):
                    value = value.keywords[0].value.body  # field(default_factory=lambda: [...]): the literal
                try:
                    default = ast.literal_eval(value) if value is not None else None
                except ValueError:
                    default = None
                rows.append((item.target.id, ast.unparse(item.annotation), default))
        classes[node.name] = rows
    return classes


def release_keys(tree_root: Path) -> dict[str, tuple[str, Any]]:
    """``{"section.key": (annotation as written, literal default or None)}`` of the release's ``JobConfig``."""
    source = (tree_root / "torchtitan" / "config" / "job_config.py").read_text()
    classes = _classes(ast.parse(source))
    keys: dict[str, tuple[str, Any]] = {}

    def walk(name: str, prefix: str) -> None:
        for key, annotation, default in classes[name]:
            where = f"{prefix}.{key}" if prefix else key
            if annotation in classes:
                walk(annotation, where)
            else:
                keys[where] = (annotation, default)

    walk("JobConfig", "")
    return keys


def _refused_as_near_miss(key: str) -> str | None:
    """The reader's refusal of a TOML file setting only ``key`` (to a value no type check sees), if any."""
    *sections, name = key.split(".")

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "probe.toml"
        path.write_text(f"[{'.'.join(sections)}]\n{name} = 1\n" if sections else f"{name} = 1\n")
        try:
            read_torchtitan_config(path)
        except InvalidInputError as error:
            return str(error) if "did you mean" in str(error) else None
    return None


def differences(tree_root: Path) -> list[str]:
    """Each difference between pipeplan's lists and the release at ``tree_root``, one line each."""
    theirs = release_keys(tree_root)
    lines = []
    for key, (annotation, default) in TOML_KEYS.items():
        if key not in theirs:
            lines.append(f"TOML_KEYS {key}: the release has no such key")
        elif theirs[key] != (annotation, default):
            lines.append(f"TOML_KEYS {key}: pipeplan {(annotation, default)!r}, the release {theirs[key]!r}")
    lines += [f"IGNORED_KEYS {key}: the release has no such key" for key in sorted(IGNORED_KEYS) if key not in theirs]
    lines += [f"PYTHON_KEYS {key}: the release has it (a TOML file may set it)" for key in PYTHON_KEYS if key in theirs]
    for key in theirs:
        if key not in TOML_KEYS and key not in IGNORED_KEYS:
            refusal = _refused_as_near_miss(key)
            if refusal is not None:
                lines.append(f"{key}: a key of the release, refused as a near miss ({refusal})")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tree", type=Path, help=f"a pytorch/torchtitan tree at {TOML_COMMIT}")
    args = parser.parse_args()
    lines = differences(args.tree)
    for line in lines:
        print(line)
    if not lines:
        print(f"pipeplan's {len(TOML_KEYS)} priced and {len(IGNORED_KEYS)} ignored torchtitan keys agree with "
              f"{args.tree} ({len(release_keys(args.tree))} keys); none of its keys is refused as a near miss")
    sys.exit(1 if lines else 0)


if __name__ == "__main__":
    main()

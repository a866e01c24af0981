"""``--export ENGINE [--out DIR]`` for the verbs that plan: the arguments, the names, the files written.

    from pipeplan.cli._export_args import add_export_arguments, check_export_args, emit_export
    add_export_arguments(parser)                   # --export with engines.targets() as its choices, --out
    check_export_args(args)                        # before any work: --out is a writable folder (or can be made)
    check_export_model(args)                       # before the search: the engine runs some plan of this model
    emit_export(args, files)                       # writes DIR/<file> for each (``wrote PATH``), or prints them raw

Files are written whole or not at all: each goes to a temporary name in the folder
first and is renamed into place only once every one of them was written.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .. import engines
from ..engines import ExportFile, LayerName
from ..errors import InvalidInputError
from ._common import report_written, write_machine_text

__all__ = ["add_export_arguments", "check_export_args", "check_export_model", "model_refusal_of", "emit_export", "write_export",
           "reference_names"]


def add_export_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--export`` (one of the registry's :func:`~pipeplan.engines.targets`) and ``--out``."""
    parser.add_argument("--export", choices=engines.targets(), default=None,
                        help="the plan for this engine (torchtitan-toml: torchtitan's last TOML release)")
    parser.add_argument("--out", metavar="DIR", default=None,
                        help="with --export: write the engine's files into DIR (made if absent), one 'wrote PATH' each; "
                             "without it the files are printed")


def _check_folder(path: str) -> None:
    folder = Path(path)
    if folder.exists() and not folder.is_dir():
        raise InvalidInputError(f"--out {path} exists and is not a folder; give a folder for the export's files")
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise InvalidInputError(f"--out {path}: {existing} is not writable")


def check_export_args(args: argparse.Namespace) -> None:
    """Refuse ``--out`` without ``--export``, and an ``--out`` that cannot take files, before any work."""
    out = getattr(args, "out", None)
    if out is None:
        return
    if not args.export:
        raise InvalidInputError("--out does not apply without --export ENGINE (it is where the engine's files go)")
    if getattr(args, "json", False):
        raise InvalidInputError("--out does not apply with --json (the JSON holds every engine's files)")
    _check_folder(out)


def check_export_model(args: argparse.Namespace) -> None:
    """Refuse ``--export ENGINE`` for a ``--preset``/``--spec`` model the engine runs no plan of, before searching.

    Not with ``--json``: the JSON gives every engine's export of every plan, a refusal with what
    the engine gives instead (Megatron-LM's stage → module mapping).

    Raises:
        InvalidInputError: the engine's :meth:`~pipeplan.engines.Engine.model_refusal` (Megatron-LM: no GPT).
    """
    if getattr(args, "json", False):
        return
    refusal = model_refusal_of(args)
    if refusal:
        raise InvalidInputError(refusal)


def model_refusal_of(args: argparse.Namespace) -> str:
    """Why ``--export``'s engine runs no plan of the ``--preset``/``--spec`` model (``""``: it may run one)."""
    if not args.export or not (getattr(args, "preset", None) or getattr(args, "spec", None)):
        return ""
    from ._spec_args import spec_from_args

    return engines.by_target(args.export).model_refusal(spec_from_args(args))


def write_export(files: Sequence[ExportFile], out: str) -> list[str]:
    """Write ``files`` into the folder ``out``, all or none; returns their paths.

    Raises:
        InvalidInputError: the folder cannot be made or written (nothing is left behind).
    """
    _check_folder(out)
    folder = Path(out)
    made = not folder.exists()
    staged: list[tuple[str, Path]] = []
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for file in files:
            handle, temporary = tempfile.mkstemp(prefix=f".{file.name}.", dir=folder)
            staged.append((temporary, folder / file.name))
            with os.fdopen(handle, "w", encoding="utf-8", newline="") as stream:
                stream.write(file.text)
            os.chmod(temporary, 0o755 if file.executable else 0o644)
        for temporary, final in staged:
            os.replace(temporary, final)
    except OSError as error:
        for temporary, _ in staged:
            Path(temporary).unlink(missing_ok=True)
        if made and folder.exists() and not any(folder.iterdir()):
            folder.rmdir()
        raise InvalidInputError(f"--out {out}: cannot write the export ({error.strerror or error})") from None
    return [str(final) for _, final in staged]


def emit_export(args: argparse.Namespace, files: Sequence[ExportFile]) -> None:
    """With ``--out``: write the files and say ``wrote PATH`` for each; else print them raw on stdout.

    Printed, one file is its text alone (Megatron's: the flag line); several are each preceded by ``# ==> name <==``.
    """
    if args.out is not None:
        for path in write_export(files, args.out):
            report_written(path)
        return
    if len(files) == 1:
        write_machine_text(files[0].printed or files[0].text)
        return
    write_machine_text("".join(f"# ==> {file.name} <==\n{file.text}" for file in files))


def reference_names(args: argparse.Namespace, num_layers: int) -> list[LayerName] | None:
    """The model's own layer names for a ``--preset``/``--spec`` model (``None`` for a profile or layer counts)."""
    if not (getattr(args, "preset", None) or getattr(args, "spec", None)):
        return None
    from ._spec_args import spec_from_args

    names = engines.layer_names_in_reference(spec_from_args(args))
    return list(names) if len(names) == num_layers else None

"""Reading and writing user files with one clear error per real reason.

    >>> from pipeplan._files import read_text, check_output_path
    >>> read_text(".", "profile file")
    Traceback (most recent call last):
    pipeplan.errors.InvalidInputError: profile file '.' is a directory, not a file
    >>> check_output_path("no-such-dir/out.png", "--plot")
    Traceback (most recent call last):
    pipeplan.errors.InvalidInputError: --plot 'no-such-dir/out.png': the directory 'no-such-dir' does not exist

Every failure is an :class:`~pipeplan.errors.InvalidInputError` that names the
file and the reason: it does not exist, is a directory, is not a regular file
(``/dev/null``, a pipe), cannot be read (permissions), is empty, or is not UTF-8.
"""

from __future__ import annotations

import os
from pathlib import Path

from .errors import InvalidInputError

__all__ = ["read_text", "check_output_path"]


def read_text(path: str | os.PathLike[str], what: str) -> str:
    """The UTF-8 text of the regular file ``path``; ``what`` names it in errors ("profile file")."""
    file = Path(path)
    label = f"{what} {str(file)!r}"
    try:
        if file.is_dir():
            raise InvalidInputError(f"{label} is a directory, not a file")
        if not file.exists():
            raise InvalidInputError(f"{label} does not exist")
        if not file.is_file():
            raise InvalidInputError(f"{label} is not a regular file (a device, pipe or socket)")
        data = file.read_bytes()
    except PermissionError:
        raise InvalidInputError(f"{label} cannot be read: permission denied") from None
    except OSError as error:
        raise InvalidInputError(f"{label} cannot be read: {error.strerror or error}") from None
    if not data.strip():
        raise InvalidInputError(f"{label} is empty")
    try:
        return data.decode("utf-8-sig")  # a byte-order mark from spreadsheet exports is fine
    except UnicodeDecodeError as error:
        raise InvalidInputError(
            f"{label} is not UTF-8 text (byte 0x{data[error.start]:02x} at offset {error.start}); "
            "save it as UTF-8 CSV or JSON"
        ) from None


def check_output_path(path: str | os.PathLike[str], what: str) -> Path:
    """Raise unless a file can be written at ``path`` (its directory exists and is writable)."""
    file = Path(path)
    label = f"{what} {str(file)!r}"
    if str(path).strip() == "":
        raise InvalidInputError(f"{what} needs a file name, got {str(path)!r}")
    if file.is_dir():
        raise InvalidInputError(f"{label} is a directory; give a file name inside it")
    parent = file.parent if str(file.parent) else Path(".")
    if not parent.is_dir():
        raise InvalidInputError(f"{label}: the directory {str(parent)!r} does not exist")
    if not os.access(parent, os.W_OK):
        raise InvalidInputError(f"{label}: the directory {str(parent)!r} is not writable")
    if file.exists() and not os.access(file, os.W_OK):
        raise InvalidInputError(f"{label} exists and is not writable")
    return file

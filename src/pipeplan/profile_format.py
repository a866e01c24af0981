r"""The text of a profile file: ``.csv`` with a JSON header line, or ``.json``.

    >>> from pathlib import Path
    >>> parse_profile('# pipeplan-profile {"version": 2}\nforward,backward\n1,2\n', Path("p.csv"), "p.csv")
    {'version': 2, 'layers': [{'forward': '1', 'backward': '2'}]}

:func:`parse_profile` turns a file's text into its top-level object (a JSON list
of layer records is returned as it is); :func:`write_profile` writes a header and
records back. What the fields mean, and which versions exist, is
:class:`pipeplan.layers.LayerProfile`'s (its module doc); this module knows only
the two file formats.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import InvalidInputError

__all__ = ["PROFILE_FORMAT", "PROFILE_VERSION", "parse_profile", "write_profile"]

#: The profile file version :meth:`LayerProfile.to_file <pipeplan.layers.LayerProfile.to_file>` writes
#: (1: no version field).
PROFILE_VERSION = 2
#: The ``format`` a version-2 file names (and its CSV header line starts with).
PROFILE_FORMAT = "pipeplan-profile"


def parse_profile(text: str, file: Path, where: str) -> Mapping[str, Any] | list[Any]:
    """The top-level object of a profile file's ``text`` (``file``'s suffix picks the format).

    Raises:
        InvalidInputError: an unknown suffix, a bad CSV header line, no layer
            rows, or text that is not valid CSV or JSON (``where`` names the file).
    """
    suffix = file.suffix.lower()
    if suffix == ".csv":
        lines = text.splitlines()
        header: dict[str, Any] = {}
        if lines and lines[0].startswith("#"):
            comment = lines.pop(0).lstrip("#").strip()
            if not comment.startswith(PROFILE_FORMAT):
                raise InvalidInputError(f"{where}: its first line must be '# {PROFILE_FORMAT} {{...}}', got {comment!r}")
            try:
                header = json.loads(comment[len(PROFILE_FORMAT):])
            except json.JSONDecodeError as error:
                raise InvalidInputError(f"{where}: its '# {PROFILE_FORMAT}' line is not valid JSON: {error}") from None
            if not isinstance(header, dict) or "version" not in header:
                raise InvalidInputError(f"{where}: its '# {PROFILE_FORMAT}' line needs a JSON object with a 'version'")
        try:
            rows = list(csv.DictReader(io.StringIO("\n".join(lines), newline="")))
        except csv.Error as error:
            raise InvalidInputError(f"{where} is not valid CSV: {error}") from None
        if not rows:
            raise InvalidInputError(f"{where} has no layer rows")
        records = [{k.strip(): (v.strip() if isinstance(v, str) else v) for k, v in row.items() if k}
                   for row in rows]
        return {**header, "layers": records}
    if suffix == ".json":
        try:
            payload = json.loads(text)
        except json.JSONDecodeError as error:
            raise InvalidInputError(f"{where} is not valid JSON: {error}") from None
        return payload
    raise InvalidInputError(f"profile file must end in .csv or .json, got {str(file)!r}")


def write_profile(file: Path, header: Mapping[str, Any], records: Sequence[Mapping[str, Any]]) -> None:
    """Write ``header`` and the layer ``records`` as ``.json`` or ``.csv`` (by ``file``'s suffix).

    Raises:
        InvalidInputError: an unknown suffix or a path that cannot be written.
    """
    suffix = file.suffix.lower()
    try:
        if suffix == ".json":
            file.write_text(json.dumps({**header, "layers": list(records)}, indent=1) + "\n")
        elif suffix == ".csv":
            columns = list(records[0])
            with file.open("w", newline="") as handle:
                handle.write(f"# {PROFILE_FORMAT} {json.dumps(dict(header))}\n")
                writer = csv.writer(handle)
                writer.writerow(columns)
                for record in records:
                    writer.writerow([value if isinstance(value, str) else repr(value) for value in record.values()])
        else:
            raise InvalidInputError(f"profile file must end in .csv or .json, got {str(file)!r}")
    except OSError as error:
        raise InvalidInputError(f"cannot write the profile to {str(file)!r}: {error.strerror or error}") from None

r"""The text of a profile file: ``.csv`` with a JSON header line, or ``.json``.

    >>> from pathlib import Path
    >>> parse_profile('# pipeplan-profile {"version": 2}\nforward,backward\n1,2\n', Path("p.csv"), "p.csv")
    {'version': 2, 'layers': [{'forward': '1', 'backward': '2'}]}

:func:`parse_profile` turns a file's text into its top-level object (a JSON list
of layer records is returned as it is); :func:`write_profile` writes a header and
records back; :func:`in_file_terms` restates a per-layer validation message
(``weight[3] = ...``) with the file, the layer's index and its name.
:func:`profile_origin` says what made a profile (``pipeplan profile`` measured it,
``pipeplan model`` computed it from shapes), from the notes the file carries, and
:func:`check_overwrite` refuses to replace a profile of one origin by one of another::

    >>> profile_origin({"source": "shapes", "model": "pi0", "device": "h100-80g"}, measured_split=False)
    ('shapes', 'computed from shapes by pipeplan model (pi0 on h100-80g)')

What the fields mean, and which versions exist, is
:class:`pipeplan.layers.LayerProfile`'s (its module doc); this module knows only
the two file formats and the notes that say where a file came from.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .errors import InvalidInputError

__all__ = ["PROFILE_FORMAT", "PROFILE_VERSION", "parse_profile", "write_profile", "in_file_terms", "profile_origin", "measured_model_flags",
           "file_origin", "check_overwrite"]

#: The profile file version :meth:`LayerProfile.to_file <pipeplan.layers.LayerProfile.to_file>` writes
#: (1: no version field).
PROFILE_VERSION = 2
#: The ``format`` a version-2 file names (and its CSV header line starts with).
PROFILE_FORMAT = "pipeplan-profile"
#: a per-layer message opens with the field and the layer's index: ``weight[3] = ...``, ``layers[3] lacks ...``
_PER_LAYER = re.compile(r"^(\w+)\[(\d+)\]")


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


def in_file_terms(message: str, payload: object, where: str) -> str:
    """``message`` (a profile's validation error) said of the file ``where`` and, if per layer, of the layer.

    ``weight[3] = 1.2 must be <= backward[3] = 1.1 ...`` becomes
    ``profile file 'p.json', layer 3 (3:TransformerBlock): weight = 1.2 must be <= backward = 1.1 ...``;
    the name is the layer record's ``name`` (``layers.3`` if it has none).
    ``payload`` is what :func:`parse_profile` returned.
    """
    if where in message:
        return message
    match = _PER_LAYER.match(message)
    if match is None:
        return f"{where}: {message}"
    index = int(match.group(2))
    records = payload.get("layers") if isinstance(payload, Mapping) else payload
    record = records[index] if isinstance(records, list) and index < len(records) else None
    name = record.get("name") if isinstance(record, Mapping) and record.get("name") else f"layers.{index}"
    body = re.sub(rf"\b(\w+)\[{index}\]", r"\1", re.sub(rf"^layers\[{index}\] ?", "", message))
    return f"{where}, layer {index} ({name}){'' if match.group(1) == 'layers' else ':'} {body}"


def measured_model_flags(measurement: Mapping[str, Any] | None) -> str:
    """The ``--model``/``--layers`` flags a measured profile's notes record: ``--model dumbbell --layers 8``."""
    notes = measurement or {}
    return " ".join(f"--{key} {notes[key]}" for key in ("model", "layers") if notes.get(key) is not None)


def profile_origin(measurement: Mapping[str, Any] | None, *, measured_split: bool) -> tuple[str, str]:
    """``(kind, description)`` of what made a profile, from its ``measurement`` notes.

    ``kind`` is ``"measured"`` (``pipeplan profile``: notes with ``source``
    ``"measured"`` or ``repeats``, or a measured split ``backward_input``),
    ``"shapes"`` (``pipeplan model``: ``source`` ``"shapes"``) or ``"unknown"``
    (hand-written, or older than these notes). The description names the model
    as its verb's flags did: ``measured by pipeplan profile (--model dumbbell --layers 8, ...)``.
    """
    notes = dict(measurement or {})
    if notes.get("source") == "shapes":
        where = f" on {notes['device']}" if notes.get("device") else ""
        return "shapes", f"computed from shapes by pipeplan model ({notes.get('model', 'a model spec')}{where})"
    if notes.get("source") == "measured" or "repeats" in notes or measured_split:
        flags = measured_model_flags(notes)
        when = ", ".join(part for part in (flags, str(notes.get("date") or "")) if part)
        return "measured", "measured by pipeplan profile" + (f" ({when})" if when else "")
    return "unknown", "of unknown origin (hand-written, or older than the notes pipeplan now writes)"


def file_origin(file: Path) -> tuple[str, str] | None:
    """:func:`profile_origin` of the profile in ``file``; ``None`` when there is none to read there."""
    try:
        if not file.is_file():
            return None
        payload = parse_profile(file.read_text(encoding="utf-8-sig"), file, str(file))
    except (OSError, UnicodeDecodeError, InvalidInputError):
        return None
    records = payload.get("layers") if isinstance(payload, Mapping) else payload
    if not isinstance(records, list) or not all(isinstance(record, Mapping) for record in records):
        return None
    notes = payload.get("measurement") if isinstance(payload, Mapping) else None
    return profile_origin(notes if isinstance(notes, Mapping) else None,
                          measured_split=any("backward_input" in record for record in records))


def check_overwrite(file: Path, kind: str, *, flag: str = "--out") -> None:
    """Refuse to write a profile of origin ``kind`` over ``file`` holding one of another (measured, from shapes).

    A measured profile costs minutes and a machine to remake; one from shapes
    is not what the measured one said. The caller skips this under ``--force``.

    Raises:
        InvalidInputError: naming the file, its profile's origin and the way out.
    """
    existing = file_origin(file)
    if existing is None or existing[0] in (kind, "unknown"):  # unknown: hand-written, or older notes
        return
    new = {"measured": "a measured one", "shapes": "one computed from shapes"}.get(kind, f"a {kind} one")
    raise InvalidInputError(
        f"{flag} {str(file)!r} holds a profile {existing[1]}; writing {new} over it would lose it: "
        "write to another file, or pass --force to replace it"
    )

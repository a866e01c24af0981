"""Reads a user's torchtitan config (TOML release, or a Python config) back into pipeplan's fields.

    from pipeplan.engines.torchtitan_config import read_torchtitan_config
    config = read_torchtitan_config(Path("llama3_8b.toml"))
    config.value("tp"), config.source_of("tp")    # 2, 'llama3_8b.toml: [parallelism] tensor_parallel_degree = 2'
    config.model.name                              # 'llama3-8B' (torchtitan's flavour, built from its dimensions)

Three forms are read, none of them run:

* a TOML file of torchtitan's last TOML release (e347b1e5e). pipeplan checks the keys it knows,
  its own list written by hand (:data:`TOML_KEYS`, the keys it prices or maps, with their types and
  that release's defaults; :data:`IGNORED_KEYS`, common keys it lists as ignored): a value of the
  wrong type of a key it reads is refused (torchtitan's tyro only warns there and the run fails
  later), and so is a ``pipeline_parallel_schedule`` torch has no class for. A key or section one
  letter or so from a known one is refused as a typo ("did you mean"), as the Megatron-LM reader
  does; any other key is listed in ``ignored`` "(not a key pipeplan knows; not priced)" (torchtitan
  itself refuses a key its ``JobConfig`` lacks when it runs). Keys the file leaves out take that
  release's defaults (the source says so). ``[training] batch_size``, the name before
  ``local_batch_size``, is read as it with a note;
* the Python config pipeplan's torchtitan export writes (``PARALLELISM = {...}``,
  ``MICRO_BATCH_SIZE``, ``LAYERS_PER_STAGE``, ... as literals), and a user's own Python config
  function for torchtitan 0.3.0 or HEAD, read with :mod:`ast`: the literal keywords of
  ``ParallelismConfig(...)`` / ``TrainingConfig(...)``, assignments ``config.parallelism.KEY = ...``
  and ``activation_checkpoint`` set to ``FullAC.Config()``, ``SelectiveAC.Config()`` or ``None``;
  a value that is no literal is not read (one note names it), the fields pipeplan does not know are
  listed as for TOML (a near miss of one it knows is refused);
* the folder pipeplan's torchtitan export wrote (its ``torchtitan_config.py`` or ``torchtitan.toml``,
  and ``schedule.csv`` beside it).

A ``pipeline_parallel_schedule_csv`` is read from beside the file and its order named by
:func:`~pipeplan.engines.pipelining_read.recognise_schedule`. The model is torchtitan's
``[model] name`` / ``flavor`` where pipeplan knows the flavour (llama3 debugmodel, 8B, 70B,
405B); another model, a Python config, or pipeplan's own export (a stand-in base) gives no model
and a note. A JSON file (DeepSpeed) or a Megatron-LM line is refused with the option that takes it.

This module reads the file and picks its reader; the steps are modules of their own: the
keys pipeplan knows and their checks (:mod:`._torchtitan_keys`), the TOML reader
(:mod:`._torchtitan_toml`), the Python reader (:mod:`._torchtitan_python`), the fields
(:mod:`._torchtitan_fields`) and the llama3 model (:mod:`._torchtitan_model`).
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

from ..errors import InvalidInputError
from ._torchtitan_fields import _Reader
from ._torchtitan_keys import IGNORED_KEYS, PYTHON_KEYS, SINGLE_STAGE_SCHEDULES, TOML_COMMIT, TOML_KEYS
from ._torchtitan_model import LLAMA3_FLAVOURS, llama3_spec, torchtitan_default_parts
from ._torchtitan_python import _python_values
from ._torchtitan_toml import _toml_values
from .run_config import RunConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the tomli backport (a dependency there)
    import tomli as tomllib

__all__ = ["read_torchtitan_config", "llama3_spec", "LLAMA3_FLAVOURS", "TOML_COMMIT", "TOML_KEYS", "PYTHON_KEYS",
           "IGNORED_KEYS", "SINGLE_STAGE_SCHEDULES", "torchtitan_default_parts"]


# ------------------------------------------------------------------ other engines' files
def _refuse_other_engine(path: Path, text: str) -> None:
    """One line for a DeepSpeed JSON given as a torchtitan config."""
    stripped = text.lstrip()
    if stripped.startswith("{"):
        try:
            json.loads(text)
        except ValueError:
            pass
        else:
            raise InvalidInputError(f"{path} is JSON, like a DeepSpeed ds_config.json: give it with --deepspeed-config")

def _refuse_megatron(path: Path, text: str) -> None:
    """One line for a Megatron-LM launch line (asked of a file that is neither TOML nor Python)."""
    if any(flag in text for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size",
                                     "--num-layers", "pretrain_gpt")):
        raise InvalidInputError(f"{path} looks like a Megatron-LM command line: give it with --megatron-args")


def _pick(path: Path) -> Path:
    """The config file in a folder pipeplan's export wrote (or the file itself)."""
    if not path.is_dir():
        return path
    for name in ("torchtitan_config.py", "torchtitan.toml"):
        if (path / name).is_file():
            return path / name
    tomls = sorted(path.glob("*.toml"))
    if len(tomls) == 1:
        return tomls[0]
    raise InvalidInputError(f"{path}: no torchtitan_config.py or torchtitan.toml (give the config file)")


def read_torchtitan_config(path: Path | str) -> RunConfig:
    """A torchtitan TOML or Python config (or the folder pipeplan's torchtitan export wrote), read.

    Raises:
        InvalidInputError: a near miss of a section or key pipeplan knows, a value of the wrong type
            of a key it reads, a schedule torch has no class for, a DeepSpeed or Megatron-LM file (one line).
    """
    given = Path(path)
    file = _pick(given)
    try:
        text = file.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{file}: cannot read it ({error})") from None
    _refuse_other_engine(file, text)
    unread: list[str] = []
    unknown: set[str] = set()
    if file.suffix == ".py":
        try:
            tree = ast.parse(text, filename=str(file))
        except SyntaxError as error:
            _refuse_megatron(file, text)
            raise InvalidInputError(f"{file}: not Python ({error.msg}, line {error.lineno})") from None
        reader = _Reader(file, _python_values(file, tree, unread, unknown), toml=False, unknown=frozenset(unknown))
    else:
        try:
            data = tomllib.loads(text)
        except tomllib.TOMLDecodeError as error:
            _refuse_megatron(file, text)
            raise InvalidInputError(f"{file}: not TOML ({error})") from None
        values = _toml_values(file, data, unknown)
        reader = _Reader(file, values, toml=True, pipeplan_toml=text.startswith("# pipeplan:"),
                         unknown=frozenset(unknown))
    reader.notes.extend(unread)
    config = reader.read()
    if given != file:
        return RunConfig(engine=config.engine, path=str(given), settings=config.settings, model=config.model,
                         model_source=config.model_source, ignored=config.ignored, notes=config.notes)
    return config

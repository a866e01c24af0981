"""A Megatron-LM launch line or launch script, read back into a :class:`~pipeplan.engines.run_config.RunConfig`.

    from pathlib import Path
    from pipeplan.engines.megatron_args import read_megatron_args
    config = read_megatron_args(Path("train_gpt.sh"))
    config.value("tp"), config.source_of("tp")   # 2, 'train_gpt.sh: --tensor-model-parallel-size 2'
    config.model                                 # the GPT the line's shape flags describe, or None

What is read (the file is never run: :mod:`shlex` splits it, no shell executes it):

* a bare flag line (``--pipeline-model-parallel-size 4 ...``), a launch line
  (``torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py ...``, ``python -m
  torch.distributed.run``, ``deepspeed``, ``python``), or a script holding one, with
  backslash-continued lines, comments and shell variables assigned in the same file
  (``GPT_ARGS="--num-layers 24 ..."``, arrays ``ARGS=(--a 1)``, ``${X:-default}``)
  expanded where the line uses them; a variable never assigned there is refused
  where the line needs its value;
* pipeplan's own export, ``megatron_args.sh`` (its ``LINE='...'``).

The flags pipeplan prices map to :data:`~pipeplan.engines.run_config.FIELDS` (the
parallel degrees, the split, the batches, the distributed optimizer, gradient
overlap, recompute, sequence parallelism, ``--tp-comm-overlap``, precision, and the
GPT's shape, which gives :attr:`RunConfig.model`); a field the line leaves out gets
Megatron-LM's default with a source saying so. The flags of :data:`IGNORED_FLAGS`
(logging, checkpoints, data, the learning-rate schedule, optimizer
hyper-parameters, initialisation, fusions) are listed in ``ignored``. A flag in
neither list is refused when it is one letter or so away from a known one (a
typo), else listed in ``ignored`` with "(not a flag pipeplan knows; not priced)".

Flag names, defaults and rules from NVIDIA/Megatron-LM at commit d98e8a64
(:data:`~pipeplan.engines.megatron.MEGATRON_COMMIT`): ``megatron/training/arguments.py``
(the parser and ``validate_args``), ``megatron/core/transformer/transformer_config.py``
(``TransformerConfig``'s defaults, whose fields become flags there) and
``megatron/core/tokenizers/utils/build_tokenizer.py`` (vocabulary padding).

This module reads the file and puts the steps together, each in a module of its own:
the shell words and the launch line (:mod:`._megatron_shell`), the flag lists
(:mod:`._megatron_vocab`), the flags grouped and sorted with the near-miss rule
(:mod:`._megatron_flags`), the split (:mod:`._megatron_split`), the knobs
(:mod:`._megatron_knobs`) and the GPT (:mod:`._megatron_model`).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from ..errors import InvalidInputError
from ._megatron_flags import _collect
from ._megatron_knobs import _knobs
from ._megatron_model import _model
from ._megatron_shell import _launch_line, _parse_script, _world
from ._megatron_split import _split
from ._megatron_vocab import (IGNORED_FLAGS, LAUNCHER_FLAGS, MODEL_FLAGS, PRICED_FLAGS, REFUSED_FLAGS, RETIRED_FLAGS,
                              TOKENIZER_VOCAB)
from .run_config import RunConfig, Setting

__all__ = [
    "read_megatron_args",
    "PRICED_FLAGS",
    "MODEL_FLAGS",
    "IGNORED_FLAGS",
    "REFUSED_FLAGS",
    "RETIRED_FLAGS",
    "LAUNCHER_FLAGS",
    "TOKENIZER_VOCAB",
]


def _other_engine(path: Path, text: str) -> None:
    """Refuse a DeepSpeed JSON or torchtitan TOML config given as a Megatron-LM line (one line naming the option)."""
    stripped = text.lstrip()
    looks_json = path.suffix == ".json"
    if not looks_json and stripped.startswith("{"):
        try:
            looks_json = isinstance(json.loads(text), dict)
        except ValueError:
            looks_json = False
    if looks_json:
        raise InvalidInputError(f"{path} looks like a DeepSpeed config (JSON), not a Megatron-LM launch line: "
                                "give it with --deepspeed-config")
    looks_toml = path.suffix == ".toml"
    if not looks_toml and re.search(r"^\s*\[[A-Za-z_.]+\]\s*$", text, re.M):  # a [table] and no flag
        looks_toml = not re.search(r"(^|\s)--[A-Za-z]", text)
    if looks_toml:
        raise InvalidInputError(f"{path} looks like a torchtitan config (TOML), not a Megatron-LM launch line: "
                                "give it with --torchtitan-config")


def read_megatron_args(path: Path) -> RunConfig:
    """The Megatron-LM run ``path`` describes: a launch line, a launch script, or pipeplan's ``megatron_args.sh``.

    Args:
        path: a file, or the directory an export wrote (its ``megatron_args.sh``).

    Returns:
        a :class:`RunConfig` (engine ``"megatron"``): the fields the flags fix, Megatron-LM's defaults for the
        ones they leave out (sources say so), the GPT when the line gives its shape, the flags read and not
        priced in ``ignored``.

    Raises:
        InvalidInputError: one line: a variable the line needs that the file never assigns, a near-miss
            of a flag, a value Megatron-LM refuses (a non-positive degree, a global batch that does not
            divide, tp·pp not dividing the world size, an unknown recompute granularity), something pipeplan
            does not plan (context or expert parallelism), or a DeepSpeed/torchtitan config.
    """
    given = str(path)
    path = Path(path)
    if path.is_dir():
        if not (path / "megatron_args.sh").is_file():
            raise InvalidInputError(f"{path} is a directory without megatron_args.sh; give the launch script")
        path = path / "megatron_args.sh"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{path}: cannot read it ({error})") from None
    name = str(path)
    _other_engine(path, text)
    script = _parse_script(text, name)
    line = _launch_line(script)
    flags = _collect(line.args, name)
    settings: dict[str, Setting] = {}
    notes: list[str] = []
    settings.update(_world(line.launcher, name, notes))
    tp_flag, pp_flag = "--tensor-model-parallel-size", "--pipeline-model-parallel-size"
    tp = flags.integer(tp_flag) if flags.given(tp_flag) else 1
    pp = flags.integer(pp_flag) if flags.given(pp_flag) else 1
    settings["tp"] = Setting(tp, flags.source(tp_flag) if flags.given(tp_flag) else flags.default(tp_flag, "(1)"))
    settings["pp"] = Setting(pp, flags.source(pp_flag) if flags.given(pp_flag) else flags.default(pp_flag, "(1)"))
    _split(flags, pp, settings)
    micro_flag, global_flag = "--micro-batch-size", "--global-batch-size"
    micro = flags.integer(micro_flag) if flags.given(micro_flag) else None
    if micro is not None:
        settings["micro_batch_size"] = Setting(micro, flags.source(micro_flag))
    gpus = settings["gpus"].value if "gpus" in settings else None
    dp = None
    if gpus is not None:
        if gpus % (tp * pp):
            raise InvalidInputError(f"tp {tp} × pp {pp} = {tp * pp} does not divide the {gpus} GPUs the launcher "
                                    f"starts ({settings['gpus'].source})")
        dp = gpus // (tp * pp)
    if flags.given(global_flag):
        global_batch = flags.integer(global_flag)
        settings["global_batch"] = Setting(global_batch, flags.source(global_flag))
        if micro is not None and dp is not None:
            if global_batch % (micro * dp):
                raise InvalidInputError(f"{global_flag} {global_batch} is not divisible by {micro_flag} {micro} × "
                                        f"data-parallel {dp} (Megatron-LM refuses it)")
            settings["num_microbatches"] = Setting(global_batch // (micro * dp), f"{name}: {global_flag} "
                                                   f"{global_batch} / ({micro_flag} {micro} × data-parallel {dp})")
    elif micro is not None and dp is not None:  # Megatron-LM: the global batch defaults to micro × dp
        settings["global_batch"] = Setting(micro * dp, flags.default(global_flag, f"({micro_flag} × data-parallel)"))
        settings["num_microbatches"] = Setting(1, flags.default(global_flag, "(one microbatch per step)"))
    _knobs(flags, tp, settings)
    model, model_source = _model(flags, tp, path.stem)
    return RunConfig("megatron", given, settings, model, model_source, tuple(flags.ignored),
                     tuple(notes + flags.notes))

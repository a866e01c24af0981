"""The pipeline split a Megatron-LM line gives: virtual stages, layers per stage (pipeplan's layers), schedule.

    from pipeplan.engines._megatron_flags import _collect
    from pipeplan.engines._megatron_split import _split
    settings = {}
    _split(_collect(["--num-layers", "30", "--pipeline-model-parallel-size", "4",
                     "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"],
                    "train.sh"), 4, settings)
    settings["layers_per_stage"].value, settings["schedule"].value   # (8, 8, 8, 8), '1f1b'

From ``--pipeline-model-parallel-layout`` (unrolled as Megatron-LM's
``PipelineParallelLayerLayout`` does), or from the counts (``--num-layers``, virtual
stages, ``--decoder-first/last-pipeline-num-layers``, the embedding and loss accounted
for) as ``validate_args`` and ``get_num_layers_to_build`` split them; pipeplan's stage 0
holds the embedding as one more layer, its last stage the loss. What Megatron-LM refuses
is refused in one line.
"""

from __future__ import annotations

import re

from ..errors import InvalidInputError
from ._megatron_flags import _Flags
from .run_config import Setting

def _layout_stages(layout: str) -> list[str]:
    """Megatron-LM's ``--pipeline-model-parallel-layout`` unrolled, one string of ``E``/``t``/``L`` per stage.

    The grammar of ``PipelineParallelLayerLayout.parse_str_to_list`` (commas cosmetic, ``(...)*n`` and
    ``x*n`` repeat, ``|`` ends a stage), restated.
    """
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    for stage in stages:
        bad = set(stage) - set("EtL")
        if bad:
            raise InvalidInputError(f"--pipeline-model-parallel-layout {layout}: {''.join(sorted(bad))!r} is not a "
                                    "layer pipeplan plans (E embedding, t decoder layer, L loss)")
    return stages


def _split(flags: _Flags, pp: int, settings: dict[str, Setting]) -> None:
    """``virtual_stages``, ``layers_per_stage`` and ``schedule`` from the split flags (pipeplan's layers)."""
    layout = "--pipeline-model-parallel-layout"
    per_virtual = "--num-layers-per-virtual-pipeline-stage"
    per_rank = "--num-virtual-stages-per-pipeline-rank"
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    account_e, account_l = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
    chosen = [f for f in (layout, per_virtual, per_rank) if flags.given(f)]
    if len(chosen) > 1:  # validate_args: no more than one of them
        raise InvalidInputError(f"{' and '.join(chosen)} are given together; Megatron-LM takes one of them")
    layers = flags.integer("--num-layers") if flags.given("--num-layers") else None
    virtual = 1
    sizes: tuple[int, ...] | None = None
    source = ""
    if flags.given(layout):
        stages = _layout_stages(flags.one(layout))
        if len(stages) % pp:
            raise InvalidInputError(f"{layout} has {len(stages)} stages, not a multiple of "
                                    f"--pipeline-model-parallel-size {pp}")
        joined = "".join(stages)
        if joined.count("E") != 1 or not stages[0].startswith("E") or joined.count("L") != 1 \
                or not stages[-1].endswith("L"):
            raise InvalidInputError(f"{layout}: pipeplan reads layouts with the embedding (E) first on stage 0 and "
                                    "the loss (L) last on the last stage")
        if any(not stage for stage in stages):
            raise InvalidInputError(f"{layout}: a stage with no layers; pipeplan's stages hold one layer or more")
        if layers is not None and joined.count("t") != layers:
            raise InvalidInputError(f"{layout} holds {joined.count('t')} decoder layers, --num-layers is {layers}")
        virtual = len(stages) // pp
        sizes = tuple(len(stage) for stage in stages)
        source = flags.source(layout)
    else:
        if flags.given(per_rank):
            virtual = flags.integer(per_rank)
        if (flags.given(first) or flags.given(last)) and (flags.given(account_e) or flags.given(account_l)):
            raise InvalidInputError(f"pipeplan does not read {first}/{last} with {account_e}/{account_l} yet; "
                                    f"write the split as {layout}")
        if (flags.given(first) or flags.given(last)) and (virtual > 1 or flags.given(per_virtual)):
            raise InvalidInputError(f"pipeplan reads {first}/{last} without virtual stages only; "
                                    f"write the split as {layout}")
        if layers is not None:
            sizes, virtual, source = _counted_split(flags, layers, pp, virtual)
    if virtual > 1 and pp == 1:
        raise InvalidInputError("virtual pipeline stages need --pipeline-model-parallel-size > 1")
    settings["virtual_stages"] = Setting(virtual, _virtual_source(flags, virtual))
    schedule = "interleaved" if virtual > 1 else "1f1b"
    settings["schedule"] = Setting(schedule, f"{flags.path}: Megatron-LM runs interleaved 1F1B with virtual stages"
                                   if virtual > 1 else f"{flags.path}: Megatron-LM runs 1F1B without virtual stages")
    if sizes is not None:
        settings["layers_per_stage"] = Setting(sizes, source)
    else:
        flags.notes.append("the line gives no --num-layers: the split (layers per stage) is left open")


def _virtual_source(flags: _Flags, virtual: int) -> str:
    for flag in ("--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage",
                 "--num-virtual-stages-per-pipeline-rank"):
        if flags.given(flag):
            return flags.source(flag, "--num-layers", "--pipeline-model-parallel-size")
    return flags.default("--num-virtual-stages-per-pipeline-rank", "(no virtual stages)")


def _counted_split(flags: _Flags, layers: int, pp: int, virtual: int) -> tuple[tuple[int, ...], int, str]:
    """The split Megatron-LM makes from counts (``validate_args`` and ``get_num_layers_to_build``), in pipeplan's
    layers: the embedding one more layer on stage 0, the loss one more on the last stage."""
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    account_e, account_l = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
    per_virtual = "--num-layers-per-virtual-pipeline-stage"
    if flags.given(first) or flags.given(last):
        counts = _first_last(flags, layers, pp)
        decoders = list(counts)
        source = flags.source("--num-layers", first, last)
    else:
        with_e, with_l = flags.given(account_e), flags.given(account_l)
        total = layers + with_e + with_l
        if total % pp:
            raise InvalidInputError(
                f"--num-layers {layers}{' + the embedding' * with_e}{' + the loss' * with_l} = {total} does not "
                f"divide by --pipeline-model-parallel-size {pp} (Megatron-LM refuses it)")
        if flags.given(per_virtual):
            chunk = flags.integer(per_virtual)
            if (total // pp) % chunk:
                raise InvalidInputError(f"{per_virtual} {chunk} does not divide the {total // pp} layers per "
                                        "pipeline rank (Megatron-LM refuses it)")
            virtual = total // pp // chunk
        stages = pp * virtual
        if total % stages:
            raise InvalidInputError(f"{total} layers do not divide over {pp} × {virtual} virtual stages")
        per = total // stages
        decoders = [per] * stages
        decoders[0] -= with_e
        decoders[-1] -= with_l
        if min(decoders) < 0 or (stages > 1 and min(decoders[1:-1] or [1]) < 1):
            raise InvalidInputError(f"--num-layers {layers} leaves a stage without layers over {stages} stages")
        source = flags.source("--num-layers", "--pipeline-model-parallel-size", account_e, account_l, per_virtual,
                              "--num-virtual-stages-per-pipeline-rank")
    sizes = list(decoders)
    sizes[0] += 1
    sizes[-1] += 1
    if min(sizes) < 1:
        raise InvalidInputError(f"--num-layers {layers} leaves a pipeline stage without layers")
    return tuple(sizes), virtual, source


def _first_last(flags: _Flags, layers: int, pp: int) -> list[int]:
    """Decoder layers per rank with ``--decoder-first/last-pipeline-num-layers`` (the other ranks share the rest
    equally; validate_args requires it to divide)."""
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    head = flags.integer(first, 0) if flags.given(first) else None
    tail = flags.integer(last, 0) if flags.given(last) else None
    if pp == 1:
        raise InvalidInputError(f"{first}/{last} need --pipeline-model-parallel-size > 1")
    middle_ranks = pp - (head is not None) - (tail is not None)
    rest = layers - (head or 0) - (tail or 0)
    if rest < 0 or (middle_ranks == 0 and rest) or (middle_ranks and rest % middle_ranks):
        raise InvalidInputError(f"--num-layers {layers} minus {first}/{last} does not divide over the other "
                                f"{middle_ranks} pipeline ranks (Megatron-LM refuses it)")
    share = rest // middle_ranks if middle_ranks else 0
    return [share if head is None else head] + [share] * (pp - 2) + [share if tail is None else tail]

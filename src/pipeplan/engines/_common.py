"""What every engine's export shares: the plan conversion, the files, the recompute it can apply.

    from pipeplan.engines._common import ExportFile, strongest_recompute
    ExportFile("ds_config.json", "{}\\n")      # a file an export writes (name inside the --out folder)
    strongest_recompute(plan)                  # "full" when any stage or module recomputes fully
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..errors import InvalidInputError
from ..plan import Plan, Recompute, as_plan, recompute_rank

__all__ = ["ExportFile", "to_plan", "strongest_recompute", "recompute_notes", "one_stage_per_rank"]


@dataclass(frozen=True)
class ExportFile:
    """One file of an export.

    Attributes:
        name: the file name inside the export folder (``megatron_args.sh``).
        text: its whole content, machine text (never wrapped), ending in one newline.
        executable: written with the executable bits (a shell script).
        printed: what stdout shows instead of the whole file when no folder is
            given (Megatron: the flag line alone); ``None``: the text.
    """

    name: str
    text: str
    executable: bool = False
    printed: str | None = None


def to_plan(plan: Plan | Sequence[int]) -> Plan:
    """The one conversion: a Plan as it is, a list of layers per stage as one stage per rank."""
    return as_plan(plan)


def _modes(plan: Plan) -> set[str]:
    return set(plan.recompute or ("none",)) | set(plan.recompute_by_module.values())


def strongest_recompute(plan: Plan) -> Recompute:
    """The most memory-saving mode any stage or module uses (engines apply one mode to every layer)."""
    return max(_modes(plan), key=recompute_rank)  # full, then every:N, op, selective, none


def recompute_notes(plan: Plan, engine: str) -> list[str]:
    """What an engine's single recompute mode approximates of ``plan``'s (empty when exact)."""
    notes = []
    if plan.uniform_recompute is None:
        notes.append(
            f"the plan recomputes per stage ({', '.join(plan.recompute)}); {engine} applies one mode to every "
            f"stage, so the export uses {strongest_recompute(plan)!r} everywhere (slower, never more memory)"
        )
    by_module = dict(plan.recompute_by_module)
    if len(set(by_module.values())) > 1:
        listed = ", ".join(f"{module} {mode}" for module, mode in by_module.items())
        notes.append(
            f"the plan recomputes per module ({listed}); {engine} applies one mode to every layer, so the export "
            f"uses {strongest_recompute(plan)!r} everywhere"
        )
    return notes


def one_stage_per_rank(plan: Plan, engine: str) -> None:
    """Raise unless stage ``s`` runs on rank ``s`` (what DeepSpeed's pipeline engine runs)."""
    if not plan.one_stage_per_rank:
        raise InvalidInputError(
            f"{engine} runs one stage per rank in order; placement {list(plan.placement)} is not that "
            "(the torch export runs any placement from its schedule CSV)"
        )

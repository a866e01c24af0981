"""How a model's reference repository trains it: recompute per module, data parallelism, state.

    from pipeplan.models.training import ReferenceTraining
    openpi = ReferenceTraining(recompute={"vision": "full", "llm": "full", "action_expert": "full"},
                               dp_mode="fsdp", ema=True, source="openpi src/openpi/models/gemma.py")
    openpi.mode_of("llm")      # "full"

A preset's :attr:`~pipeplan.models.spec.ModelSpec.training` says what its
reference code runs, so the planner can compare with it (the ``reference-fsdp``
baseline, docs/planner.md) and start from it. Torch-free, data only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from .. import data_parallel
from ..errors import InvalidInputError
from ..plan import RECOMPUTE_MODES, Recompute

__all__ = ["ReferenceTraining"]


@dataclass(frozen=True)
class ReferenceTraining:
    """The training defaults of a model's reference code.

    Attributes:
        recompute: activation recompute per module name (``"none"``,
            ``"selective"`` or ``"full"``); a module not named uses ``default_recompute``.
        dp_mode: the data parallelism the reference runs, a mode's name
            (:func:`pipeplan.data_parallel.names`; openpi and OpenVLA: ``"fsdp"``).
        ema: the reference keeps an exponential moving average of the weights
            (an fp32 copy: 4 more bytes per trainable parameter).
        optimizer: the optimizer's name as the reference configures it (``"adamw"``).
        source: the file(s) these come from.
        default_recompute: the mode of a module ``recompute`` does not name.
        implementation: the code the modules' reference paths (``fqn``) name, e.g.
            ``"megatron-gpt"``, ``"openpi-pytorch"``
            (:func:`pipeplan.engines.reference_of`); ``None``: not recorded.
    """

    recompute: Mapping[str, Recompute] = field(default_factory=dict, hash=False)
    dp_mode: str = data_parallel.FULLY_SHARDED
    ema: bool = False
    optimizer: str = "adamw"
    source: str = ""
    default_recompute: Recompute = "none"
    implementation: str | None = None

    def __post_init__(self) -> None:
        for name, mode in {**self.recompute, "(default)": self.default_recompute}.items():
            if mode not in RECOMPUTE_MODES:
                raise InvalidInputError(
                    f"reference recompute of {name!r} must be one of {', '.join(RECOMPUTE_MODES)}, got {mode!r}")
        data_parallel.check_mode("reference dp_mode", self.dp_mode)

    def mode_of(self, module: str) -> Recompute:
        """The recompute mode of ``module`` under the reference."""
        return self.recompute.get(module, self.default_recompute)

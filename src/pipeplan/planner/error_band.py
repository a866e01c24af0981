"""How far the step model's answers are from published runs, for the device and engine asked about.

    from pipeplan.planner.error_band import error_band
    band = error_band("a100-80g", "megatron", gpt=True)
    band.line()        # "step and MFU: ±7.3% on average, worst 15.1%, on 18 published Megatron-LM runs on a100-80g ..."
    band.checked       # True: this device and engine were checked against published runs
    band.to_dict()     # what plan --json and check --json carry under "error_band"

The bands are measured, not guessed: each :class:`Checked` row is the summary line of a
fidelity benchmark (``benchmarks/engine_fidelity.py``: Narayanan et al. 2021 Table 1 and
Korthikanti et al. 2022 Table 5 on A100 80 GB, Megatron-LM, each run's knobs pinned), and
``tests/test_error_band.py`` reads that line from docs/cost_model.md, where the benchmark
writes it, so the two cannot drift. A question outside every checked row (another device,
engine or a model that is not a GPT) gets the nearest row's numbers as a floor and a note
saying what was not checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["Checked", "ErrorBand", "CHECKED", "error_band"]


@dataclass(frozen=True)
class Checked:
    """One device and engine checked against published end-to-end runs.

    Attributes:
        device: the device preset's name (:func:`pipeplan.hardware.device_names`).
        engine: the engine's registry name.
        mean: mean |error| of throughput over the runs (a fraction).
        worst: the largest |error| (a fraction).
        runs: how many published runs.
        what: the runs, in words (papers and tables).
        command: the command that measures it.
    """

    device: str
    engine: str
    mean: float
    worst: float
    runs: int
    what: str
    command: str


#: Every checked device and engine. The numbers are the summary lines of the command's tables in
#: docs/cost_model.md ("Mean |error| of throughput over 18 runs: **7.3%** ... worst 15.1%" for Megatron-LM;
#: "torchtitan, 6 held-out runs: mean |error| of WPS **4.7%** ... worst 10.8%" for torchtitan, its held-out
#: rows only: its eager-kernel factor was fitted to the two others), and of ``benchmarks/torchtitan_h100.py``'s table
#: in docs/engines.md ("5 held-out runs: mean |error| **6.3%**"), kept equal to them by tests/test_error_band.py.
CHECKED: tuple[Checked, ...] = (
    Checked("a100-80g", "megatron", 0.073, 0.151, 18,
            "GPT runs of Narayanan et al. 2021 Table 1 and Korthikanti et al. 2022 Table 5, 1.7B to 1T parameters "
            "on 32 to 3072 GPUs, each run's knobs pinned",
            "python benchmarks/engine_fidelity.py"),
    Checked("a100-80g", "torchtitan", 0.047, 0.108, 6,
            "Llama 3 70B, Llama 2 13B and 70B runs of torchtitan's docs/performance.md (0413364), FSDP2 over 64 "
            "GPUs, each run's checkpointing pinned; held out from the eager-kernel factor's fit (Llama 3 8B)",
            "python benchmarks/engine_fidelity.py"),
    Checked("a100-80g", "deepspeed", 0.042, 0.069, 7,
            "BLOOM 176B resumed on 24 and 36 nodes (bigscience tr11 reshaping-log.md), Megatron-DeepSpeed's pipeline "
            "engine at TP 1 to 4 and PP 12 to 72, each layout pinned; held out from its pipeline factor's fit "
            "(docs/engines.md, DeepSpeed)",
            "python benchmarks/engine_fidelity.py"),
    Checked("h100-96g", "torchtitan", 0.063, 0.141, 5,
            "Llama 3.1 8B and 70B runs of torchtitan's H100 benchmark files (llama3_h100_202412 Table 3, "
            "asyncTP_llama3_h100_2025-06), FSDP2 over 64 to 256 GPUs, TP 8 vanilla and async, each run's knobs "
            "pinned; held out from the three fits (docs/engines.md, torchtitan-h100)",
            "python benchmarks/torchtitan_h100.py"),
)


@dataclass(frozen=True)
class ErrorBand:
    """The error to read a predicted step and MFU with.

    Attributes:
        basis: the checked row the numbers come from.
        checked: the device, engine and kind of model asked about are all the basis's.
        unchecked: what was not checked, one phrase each (empty when :attr:`checked`).
    """

    basis: Checked
    checked: bool
    unchecked: tuple[str, ...] = ()

    def line(self) -> str:
        """One line for under a table: the band, its basis, and what lies outside it."""
        basis = self.basis
        text = (f"step and MFU: ±{100 * basis.mean:.1f}% on average, worst {100 * basis.worst:.1f}%, on "
                f"{basis.runs} published {_ENGINE_WORDS.get(basis.engine, basis.engine)} runs on {basis.device} "
                f"({basis.command})")
        if self.unchecked:
            text += f"; not checked end to end: {', '.join(self.unchecked)} (read it as a floor)"
        return text

    def to_dict(self) -> dict[str, Any]:
        """``mean``, ``worst`` (fractions), ``runs``, ``basis`` (device, engine, what, command), ``checked``, ``unchecked``."""
        basis = self.basis
        return {"mean": basis.mean, "worst": basis.worst, "runs": basis.runs,
                "basis": {"device": basis.device, "engine": basis.engine, "what": basis.what,
                          "command": basis.command},
                "checked": self.checked, "unchecked": list(self.unchecked)}


_ENGINE_WORDS = {"megatron": "Megatron-LM", "deepspeed": "DeepSpeed", "torchtitan": "torchtitan", "torch": "PyTorch"}


def error_band(device: str, engine: str, *, gpt: bool, measured_profile: bool = False) -> ErrorBand:
    """The band for a prediction on ``device`` (a preset's name) with ``engine``.

    Args:
        device: the device's name (a calibrated device file's name is not a checked device).
        engine: the engine's registry name.
        gpt: the model is a GPT (an embedding, a transformer stack and an LM head); the
            checked runs are GPTs, so a VLA's vision encoder and action head are outside them.
        measured_profile: the layer times were measured (``--profile``), not computed from the
            device's roofline: the band of the roofline does not apply to them.
    """
    rows = [row for row in CHECKED if row.device == device and row.engine == engine]
    basis = rows[0] if rows else next((row for row in CHECKED if row.engine == engine), CHECKED[0])
    unchecked = []
    if basis.device != device:
        unchecked.append(f"{device}")
    if basis.engine != engine:
        unchecked.append(f"{_ENGINE_WORDS.get(engine, engine)}'s engine")
    if not gpt:
        unchecked.append("layers beyond a GPT's (fitted per operator only)")
    if measured_profile:
        unchecked.append("layer times measured by --profile")
    return ErrorBand(basis, not unchecked, tuple(unchecked))

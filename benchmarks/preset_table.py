"""Per-module parameter and FLOP shares of every model preset (tables for docs/presets.md).

    python benchmarks/preset_table.py            # print the tables
    python benchmarks/preset_table.py --write    # also record them in docs/presets.md

FLOPs are training FLOPs per example (F + B + W, no recomputation) as
:func:`pipeplan.models.layer_costs.flops_per_sample` counts them: a frozen
module contributes its forward (and its B when a gradient must pass through it).
Everything is computed from the shapes; nothing is measured, so the machine's
load does not matter.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write  # noqa: E402

from pipeplan import presets  # noqa: E402
from pipeplan.models.layer_costs import flops_per_sample  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "presets.md"
COMMAND = "python benchmarks/preset_table.py --write"


def _count(value: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("k", 1e3)):
        if value >= size:
            return f"{value / size:.3g}{unit}"
    return f"{value:.3g}"


def overview() -> str:
    """One row per preset: parameters, trained parameters, FLOPs per example, LLM tokens."""
    rows = ["| preset | parameters | trained | training FLOPs / example | modules |", "|---|---:|---:|---:|---|"]
    for name in presets.names():
        spec = presets.get(name)
        flops = sum(flops_per_sample(spec).values())
        rows.append(f"| `{name}` | {_count(spec.num_parameters())} | {_count(spec.trainable_parameters())} | "
                    f"{_count(flops)} | {len(spec.modules)} |")
    return "\n".join(rows)


def module_table(name: str) -> str:
    """One row per module of preset ``name``."""
    spec = presets.get(name)
    params = spec.module_parameters()
    flops = flops_per_sample(spec)
    tokens = spec.module_tokens()
    total_params, total_flops = sum(params.values()), sum(flops.values())
    rows = [f"**`{name}`**", "", "| module | kind | parameters | share | FLOP share | tokens | frozen |",
            "|---|---|---:|---:|---:|---:|---|"]
    for module in spec.modules:
        rows.append(f"| {module.name} | {module.kind} | {_count(params[module.name])} | "
                    f"{params[module.name] / total_params:.1%} | {flops[module.name] / total_flops:.1%} | "
                    f"{tokens[module.name]} | {'yes' if module.frozen else ''} |")
    return "\n".join(rows)


def block() -> str:
    """What ``--write`` records between the ``preset-table`` markers (tests/test_docs_tables.py checks it)."""
    return "\n\n".join([overview(), *(module_table(n) for n in presets.names()), computed_line(COMMAND)])


def main() -> int:
    return print_or_write(DOC, "preset-table", block, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())

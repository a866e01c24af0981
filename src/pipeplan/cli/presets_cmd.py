"""``pipeplan presets``: the model presets, their modules, parameters, FLOPs and tokens.

    $ pipeplan presets
    $ pipeplan presets --json

FLOPs are training FLOPs (F + B + W) per example with selective recompute off,
frozen modules counted as they run (forward only, or forward and B).
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from .. import presets
from ..models.layer_costs import flops_per_sample
from ..models.spec import ModelSpec
from ._common import make_console, print_json
from ._spec_args import human_count

__all__ = ["register", "run", "preset_summary"]


def register(subparsers: Any) -> None:
    """Add the ``presets`` verb."""
    parser = subparsers.add_parser(
        "presets", help="list the model presets (modules, parameters, FLOPs, tokens)",
        description="List the model presets: modules, parameters, training FLOPs per example, tokens.",
    )
    parser.add_argument("--json", action="store_true", help="print the presets as JSON")
    parser.set_defaults(func=run)


def preset_summary(spec: ModelSpec) -> dict[str, Any]:
    """Per-module parameters, FLOPs per example, tokens and frozen flags of ``spec``."""
    params = spec.module_parameters()
    flops = flops_per_sample(spec)
    tokens = spec.module_tokens()
    return {
        "name": spec.name,
        "description": spec.description,
        "parameters": spec.num_parameters(),
        "trainable_parameters": spec.trainable_parameters(),
        "options": presets.options(spec.name) if spec.name in presets.names() else {},
        "flops_per_example": sum(flops.values()),
        "modules": [
            {"name": m.name, "kind": m.kind, "parameters": params[m.name], "flops_per_example": flops[m.name],
             "tokens": tokens[m.name], "frozen": m.frozen}
            for m in spec.modules
        ],
    }


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan presets``."""
    summaries = [preset_summary(presets.get(name)) for name in presets.names()]
    if args.json:
        print_json(summaries)
        return 0
    table = Table(title="model presets (FLOPs: training F + B + W per example)")
    for column in ("preset", "parameters", "FLOPs", "modules: parameters / FLOP share / tokens"):
        table.add_column(column, justify="left" if column.startswith(("preset", "modules")) else "right")
    for summary in summaries:
        total = summary["flops_per_example"]
        parts = [
            f"{m['name']}{' (frozen)' if m['frozen'] else ''}: {human_count(m['parameters'])} / "
            f"{m['flops_per_example'] / total:.1%} / {m['tokens']}"
            for m in summary["modules"]
        ]
        table.add_row(summary["name"], human_count(summary["parameters"]), human_count(total), "\n".join(parts))
    make_console().print(table)
    return 0

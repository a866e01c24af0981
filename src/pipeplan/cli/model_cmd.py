"""``pipeplan model``: the per-layer profile of a preset or a spec file on a device.

    $ pipeplan model --preset pi0 --gpu h100-80g --micro-batch-size 4
    $ pipeplan model --spec examples/model_spec.json --out shapes.json  # read by pipeplan partition
    $ pipeplan model --preset gr00t-n1 --by-module --json
    $ pipeplan model --schema [--json]     # every field a spec file may give (docs/presets.md)

Times are milliseconds per microbatch: each layer's kernels timed by the device
model (docs/cost_model.md; ``--mfu`` switches to the flat model, every FLOP at
that fraction of peak; ``--device FILE`` takes a ``pipeplan calibrate`` file).
The file ``--out`` writes notes it was computed from shapes (which model, which
device); it does not replace a measured profile (``pipeplan profile``) unless ``--force``.
For a ``--spec`` file, the cost-changing defaults it left out are printed (``model defaults``).
``--engine`` and its knobs (``--recompute``, ``--sequence-parallel``, ``--tp-comm-overlap``) are
``plan``'s (cli/_engine_args.py), priced the same way; ``assumptions`` (``--json``) says each
knob's value, given or assumed.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from ..hardware.device_file import device_fields
from ..errors import InvalidInputError
from ..models.layer_costs import layer_costs
from ..profile_format import check_overwrite
from ..units import format_bytes
from ._common import make_console, print_json, report_written
from ._engine_args import REFERENCE, engine_assumptions, layer_options, spec_workload
from ._spec_args import (add_spec_arguments, defaults_assumption, device_from_args, human_count,
                         settle_spec_options, spec_from_args)

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``model`` verb."""
    parser = subparsers.add_parser(
        "model", help="per-layer F/B/W time, FLOPs and bytes of a model preset or spec",
        description="Turn a model preset or spec file into per-layer costs on a device and write them.",
    )
    add_spec_arguments(parser)
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="write the layer profile as .json or .csv (read by pipeplan partition); refused over "
                             "a measured profile unless --force")
    parser.add_argument("--force", action="store_true",
                        help="let --out replace a profile of another origin (one pipeplan profile measured)")
    parser.add_argument("--by-module", action="store_true", help="one row per module instead of per layer")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.add_argument("--schema", action="store_true",
                        help="print the spec file schema (every module kind's fields, types, ranges, defaults) "
                             "and exit; with --json as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan model``."""
    if args.schema:
        return _print_schema(args)
    settle_spec_options(args, applies=True)
    if args.spec:
        _check_spec_path(args.spec)
    out = _out_path(args)
    spec = spec_from_args(args)
    device, link = device_from_args(args)
    options = layer_options(args, spec)
    workload = spec_workload(args, spec, device, link)  # priced as plan prices it (cli/_engine_args.py)
    profile = workload.stage_profile(args.micro_batch_size)  # the model as one stage (Megatron's block:N too)
    options["tp_comm_overlap"] = workload.tp_comm_overlap
    assumptions = engine_assumptions(args, spec, unpinned=REFERENCE, device=device.name)
    defaults = defaults_assumption(args, spec)
    notes = {"source": "shapes", "model": spec.name, "device": device.name, "microbatch_size": args.micro_batch_size,
             **options, **({"spec": args.spec} if args.spec else {"preset": args.preset})}
    costs = layer_costs(spec, args.micro_batch_size, recompute=options["recompute"],
                        tensor_parallel=args.tp, sequence_parallel=options["sequence_parallel"])
    records = profile.to_records()
    for record, cost in zip(records, costs):
        record["forward_flops"] = cost.forward_flops
        record["input_grad_flops"] = cost.input_grad_flops
        record["weight_grad_flops"] = cost.weight_grad_flops
    if out is not None:
        profile.replaced(measurement=notes).to_file(out)
        report_written(str(out))
    if args.json:
        kernels = [op for cost in costs for op in cost.ops]
        print_json({"model": spec.name, "device": device_fields(device), "cost_model": device.summary(),
                    "gemm_fallbacks": device.gemm_fallbacks(kernels), "achievable_flops": device.achievable_flops,
                    "micro_batch_size": args.micro_batch_size, **options, "assumptions": assumptions, **defaults,
                    "layers": records})
        return 0
    rows = _by_module(records, costs) if args.by_module else records
    title = (f"{spec.name} on {device.name}, microbatch {args.micro_batch_size}, tp {args.tp}: "
             "ms and bytes per microbatch (I + W = B, the full backward)")
    table = Table(title=title)
    for column in ("layer", "F ms", "I ms", "W ms", "F FLOPs", "params", "activations", "W stash", "send"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    for row in rows:
        held = human_count(row["params"]) + (" (tied)" if row.get("tied_to", -1) >= 0 else "")
        table.add_row(str(row["name"]), f"{row['forward']:.4g}", f"{row['backward'] - row['weight']:.4g}",
                      f"{row['weight']:.4g}", human_count(row["forward_flops"]), held,
                      format_bytes(row["activation_bytes"]), format_bytes(row["weight_stash_bytes"]),
                      format_bytes(row["send_bytes"]))
    console = make_console()
    console.print(table)
    console.print(f"cost model: {device.summary()}", markup=False, highlight=False)
    total_f, total_b = sum(profile.forward), sum(profile.backward)
    params, trained = profile.held_params()  # a tied table once
    console.print(f"{profile.num_layers} layers; F {total_f:.4g} ms + backward {total_b:.4g} ms per microbatch; "
                  f"{human_count(params)} parameters, {human_count(trained)} trained"
                  + (" (a tied table counted once)" if profile.tied_groups else ""))
    console.print("assumptions: " + "; ".join(f"{key} {value}" for key, value in assumptions.items()
                                              if key != "tensor parallel" or args.tp > 1), markup=False, highlight=False)
    for key, text in defaults.items():
        console.print(f"{key}: {text}", markup=False, highlight=False)
    return 0


def _print_schema(args: argparse.Namespace) -> int:
    """``--schema``: the spec file schema, as tables or (``--json``) JSON; it takes no model or device."""
    from ..models.schema_docs import NESTED, schema_json, schema_rows
    from ..models.modules import MODULE_KINDS

    given = [flag for flag, value in (("--preset", args.preset), ("--spec", args.spec), ("--out", args.out),
                                      ("--by-module", args.by_module), ("--force", args.force)) if value]
    if given:
        raise InvalidInputError(f"--schema prints the spec file schema and takes no model: drop {', '.join(given)}")
    settle_spec_options(args, applies=False, what="--schema")
    if args.json:
        print_json(schema_json())
        return 0
    console = make_console()
    for kind, cls in [*MODULE_KINDS.items(), *NESTED.items()]:
        table = Table(title=f"{kind} ({cls.__name__})", title_justify="left")
        for column in ("field", "type", "default", "meaning"):
            table.add_column(column, overflow="fold")
        for row in schema_rows(cls):
            table.add_row(*row)
        console.print(table)
    console.print("†: a default that changes the cost by more than a few percent; a spec file that leaves it out "
                  "gets it listed under 'model defaults'. Booleans are JSON true/false only. docs/presets.md has "
                  "the same tables.", markup=False, highlight=False)
    return 0


def _by_module(records: list[dict[str, Any]], costs: list[Any]) -> list[dict[str, Any]]:
    """Sum the layer records of each module (a joint pair is one group); send is the group's last."""
    groups: dict[str, dict[str, Any]] = {}
    for record, cost in zip(records, costs):
        key = "+".join(cost.modules)
        group = groups.setdefault(key, {"name": key, "send_bytes": 0.0, "tied_to": record.get("tied_to", -1)})
        for field in ("forward", "backward", "weight", "forward_flops", "params", "activation_bytes",
                      "weight_stash_bytes"):
            group[field] = group.get(field, 0.0) + record[field]
        group["send_bytes"] = record["send_bytes"]
    return list(groups.values())


def _out_path(args: argparse.Namespace) -> Path | None:
    """``--out``, checked before any work: a profile suffix, and no measured profile replaced without ``--force``."""
    if not args.out:
        return None
    path = Path(args.out)
    if path.suffix.lower() not in (".json", ".csv"):
        raise InvalidInputError(f"--out must end in .json or .csv, got {str(path)!r}")
    if not args.force:
        check_overwrite(path, "shapes")
    return path


def _check_spec_path(spec: str) -> None:
    """A missing ``--spec`` file: say where it was looked for, where the example lives, and the presets."""
    path = Path(spec)
    if path.exists():
        return
    example = Path(__file__).resolve().parents[3] / "examples" / "model_spec.json"
    here = f" (in this checkout: {example})" if example.is_file() else ""
    raise InvalidInputError(
        f"--spec {spec}: no file at {path.absolute()} (a relative path is read from the current directory, "
        f"{Path.cwd()}); the example spec is examples/model_spec.json in the pipeplan repository{here}; "
        "or name a preset with --preset (pipeplan presets lists them)"
    )

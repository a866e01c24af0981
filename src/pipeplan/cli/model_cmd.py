"""``pipeplan model``: the per-layer profile of a preset or a spec file on a device.

    $ pipeplan model --preset pi0 --gpu h100-80g --micro-batch-size 4
    $ pipeplan model --spec examples/model_spec.json --out prof.json   # read by pipeplan partition
    $ pipeplan model --preset gr00t-n1 --by-module --json

Times are milliseconds per microbatch: each layer's kernels timed by the device
model (docs/cost_model.md; ``--mfu`` switches to the flat model, every FLOP at
that fraction of peak; ``--device FILE`` takes a ``pipeplan calibrate`` file).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from ..device_file import device_fields
from ..errors import InvalidInputError
from ._common import make_console, print_json
from ..viz.tables import format_decimal_bytes
from ._spec_args import add_spec_arguments, device_from_args, human_count, recompute_of, spec_from_args

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``model`` verb."""
    parser = subparsers.add_parser(
        "model", help="per-layer F/B/W time, FLOPs and bytes of a model preset or spec",
        description="Turn a model preset or spec file into per-layer costs on a device and write them.",
    )
    add_spec_arguments(parser)
    parser.add_argument("--out", default=None, metavar="PATH",
                        help="write the layer profile as .json or .csv (read by pipeplan partition)")
    parser.add_argument("--by-module", action="store_true", help="one row per module instead of per layer")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan model``."""
    spec = spec_from_args(args)
    device, _link = device_from_args(args)
    options = {"recompute": recompute_of(args, spec), "tensor_parallel": args.tp,
               "sequence_parallel": args.sequence_parallel}
    profile = spec.to_layer_profile(device, args.micro_batch_size, **options)
    costs = spec.layer_costs(args.micro_batch_size, **options)
    records = profile.to_records()
    for record, cost in zip(records, costs):
        record["forward_flops"] = cost.forward_flops
        record["input_grad_flops"] = cost.input_grad_flops
        record["weight_grad_flops"] = cost.weight_grad_flops
    if args.out:
        _write(Path(args.out), profile)
    if args.json:
        kernels = [op for cost in costs for op in cost.ops]
        print_json({"model": spec.name, "device": device_fields(device), "cost_model": device.summary(),
                    "gemm_fallbacks": device.gemm_fallbacks(kernels), "achievable_flops": device.achievable_flops,
                    "micro_batch_size": args.micro_batch_size, **options, "layers": records})
        return 0
    rows = _by_module(records, costs) if args.by_module else records
    title = (f"{spec.name} on {device.name}, microbatch {args.micro_batch_size}, recompute {args.recompute}: "
             "ms and bytes per microbatch")
    table = Table(title=title)
    for column in ("layer", "F ms", "B ms", "W ms", "F FLOPs", "params", "activations", "W stash", "send"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    for row in rows:
        held = human_count(row["params"]) + (" (tied)" if row.get("tied_to", -1) >= 0 else "")
        table.add_row(str(row["name"]), f"{row['forward']:.4g}", f"{row['backward'] - row['weight']:.4g}",
                      f"{row['weight']:.4g}", human_count(row["forward_flops"]), held,
                      format_decimal_bytes(row["activation_bytes"]), format_decimal_bytes(row["weight_stash_bytes"]),
                      format_decimal_bytes(row["send_bytes"]))
    console = make_console()
    console.print(table)
    console.print(f"cost model: {device.summary()}", markup=False, highlight=False)
    total_f, total_b = sum(profile.forward), sum(profile.backward)
    params, trained = profile.held_params()  # a tied table once
    console.print(f"{profile.num_layers} layers; F {total_f:.4g} ms + backward {total_b:.4g} ms per microbatch; "
                  f"{human_count(params)} parameters, {human_count(trained)} trained"
                  + (" (a tied table counted once)" if profile.tied_groups else "")
                  + (f"; profile written to {args.out}" if args.out else ""))
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


def _write(path: Path, profile: Any) -> None:
    """The profile file (version 2, :meth:`~pipeplan.layers.LayerProfile.to_file`) ``pipeplan partition`` reads."""
    if path.suffix.lower() not in (".json", ".csv"):
        raise InvalidInputError(f"--out must end in .json or .csv, got {str(path)!r}")
    profile.to_file(path)

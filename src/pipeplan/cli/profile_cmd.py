"""``pipeplan profile``: measure a model's layers and this machine into a profile file.

    $ pipeplan profile --out prof.json                              # the built-in VLA-shaped model
    $ pipeplan profile --model dumbbell --nproc 4 --out prof.csv
    $ pipeplan profile --model mypkg.models:factory --batch-size 32 -m 8 --out prof.json

Measures, per top-level layer, the forward, the full backward and the two halves
of a split backward as the runtime runs them (ms, median of ``--repeats`` runs
after ``--warmup``, with their interquartile range), activation and output bytes
and parameters, on one microbatch (``--batch-size / -m`` samples) with the
threads each of ``--nproc`` ranks will have; then ``--nproc`` processes measure
the link (ping-pong) and core sharing into the file's calibration. A spread
larger than ``--max-spread`` (a loaded machine) is refused with exit 2. The
file feeds ``pipeplan partition``, ``pipeplan simulate --profile`` and
``pipeplan run --profile``.
"""

from __future__ import annotations

import argparse
from typing import Any

from rich.table import Table

from .._validation import positive_float, positive_int
from ..errors import InvalidInputError
from ._common import make_console, print_json, require_torch

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``profile`` verb."""
    parser = subparsers.add_parser(
        "profile",
        help="measure a model's layers and this machine into a profile file",
        description="Measure per-layer F, B (input gradient), W, bytes and parameters as the runtime runs them, "
                    "and the link and core sharing of this machine, into a JSON or CSV profile file.",
    )
    parser.add_argument("--model", default=None,
                        help="package.module:factory, or a built-in model: vla (default), dumbbell")
    parser.add_argument("--layers", type=int, default=8, help="transformer blocks of a built-in model (default 8)")
    parser.add_argument("--batch-size", type=int, default=16, help="samples per step (default 16)")
    parser.add_argument("-m", "--microbatches", type=int, default=4,
                        help="microbatches per step; one microbatch is measured (default 4)")
    parser.add_argument("--nproc", type=int, default=2,
                        help="processes the run will use: sets threads per process and the calibration (default 2)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="what each time is of its repeats: median (default) or min, the fastest run "
                             "(on a shared machine: the run least slowed by others)")
    parser.add_argument("--max-spread", type=float, default=0.5,
                        help="refuse when a layer's interquartile range exceeds this fraction of its F + B "
                             "(default 0.5)")
    parser.add_argument("--no-calibrate", action="store_true", help="skip the link and core-sharing calibration")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                        help="process-group backend of the calibration (default gloo)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the calibration ranks (default 120)")
    parser.add_argument("--out", required=True, help="the profile file to write, .json or .csv")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.set_defaults(func=run)


_REPEATS_WHY = "runs per measurement; more only lengthen it"


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan profile``."""
    if not str(args.out).lower().endswith((".json", ".csv")):
        raise InvalidInputError(f"--out must end in .json or .csv, got {args.out!r}")
    spread = positive_float("--max-spread", args.max_spread)
    from ..limits import MAX_REPEATS, check_builtin_model_size
    from ..models import BUILTIN_MODELS

    layers = positive_int("--layers", args.layers)
    if args.model is None or args.model in BUILTIN_MODELS:
        check_builtin_model_size(layers, positive_int("--nproc", args.nproc))
    require_torch("pipeplan profile")
    from ..runtime.loop import profile_model

    try:
        profile = profile_model(
            args.model,
            layers=layers,
            batch_size=positive_int("--batch-size", args.batch_size),
            microbatches=positive_int("-m", args.microbatches),
            nproc=positive_int("--nproc", args.nproc),
            repeats=positive_int("--repeats", args.repeats, maximum=MAX_REPEATS, why=_REPEATS_WHY),
            warmup=positive_int("--warmup", args.warmup, minimum=0, maximum=MAX_REPEATS, why=_REPEATS_WHY),
            backend=args.backend,
            max_spread=spread,
            timeout=positive_float("--timeout", args.timeout, unit="seconds"),
            calibrate=not args.no_calibrate,
            statistic=args.statistic,
        )
    except (MemoryError, RuntimeError) as error:
        if not isinstance(error, MemoryError) and "allocate" not in str(error):
            raise
        raise InvalidInputError(
            f"the profile ran out of memory (--batch-size {args.batch_size}, --layers {layers}): "
            "choose a smaller batch or model"
        ) from None
    profile.to_file(args.out)
    if args.json:
        print_json({"out": args.out, "layers": profile.to_records(),
                    "calibration": None if profile.calibration is None else profile.calibration.to_dict(),
                    "measurement": profile.measurement})
        return 0
    console = make_console()
    table = Table(title=f"profile of {profile.measurement.get('model')} "
                        f"(ms per microbatch of {profile.measurement.get('microbatch_size')}, median ± IQR)")
    for column in ("layer", "F", "B (full)", "I", "W", "activations", "send", "params"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    assert profile.backward_input is not None
    for index, name in enumerate(profile.names):
        def cell(key: str, value: float) -> str:
            return f"{value:.3f} ± {profile.spread[key][index]:.3f}" if key in profile.spread else f"{value:.3f}"

        table.add_row(
            name, cell("forward", profile.forward[index]), cell("backward", profile.backward[index]),
            cell("backward_input", profile.backward_input[index]), cell("weight", profile.weight[index]),
            f"{profile.activation_bytes[index] / 2**20:.2f} MiB", f"{profile.send_bytes[index] / 2**10:.1f} KiB",
            f"{profile.params[index]:,.0f}",
        )
    console.print(table)
    calibration = profile.calibration
    if calibration is not None:
        console.print(
            f"calibration ({calibration.backend}, {profile.measurement.get('nproc')} processes x "
            f"{profile.measurement.get('threads_per_process')} thread(s)): latency {calibration.latency:.3f} ms, "
            f"bandwidth {calibration.bandwidth / 1e3:.1f} MB/s, core sharing slowdown "
            + ", ".join(f"{k + 1} busy x{factor:.2f}" for k, factor in enumerate(calibration.slowdown)),
            markup=False, highlight=False,
        )
    load = profile.measurement.get("loadavg_before")
    console.print(f"wrote {args.out} (load average {load[0]:.2f} before measuring)" if load else f"wrote {args.out}",
                  markup=False, highlight=False)
    return 0

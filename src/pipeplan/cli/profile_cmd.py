"""``pipeplan profile``: measure a model's layers and this machine into a profile file.

    $ pipeplan profile --out prof.json                              # the built-in VLA-shaped model
    $ pipeplan profile --model dumbbell --nproc 4 --out prof.csv
    $ pipeplan profile --model mypkg.models:factory --batch-size 32 -m 8 --out prof.json

Measures, per top-level layer, the forward, the full backward and the two halves
of a split backward as the runtime runs them (ms, median of ``--repeats`` runs
after ``--warmup``, with their interquartile range; ``--statistic min``: the
fastest run), activation and output bytes and parameters, on one microbatch
(``--batch-size / -m`` samples; ``-m`` defaults to 2 × ``--nproc``) with the
threads each of ``--nproc`` ranks will have; then ``--nproc`` processes measure
the link (ping-pong) and core sharing into the file's calibration. Under the
median, a spread larger than ``--max-spread`` (a loaded machine) is refused with
exit 2. The file feeds ``pipeplan plan --profile``, ``pipeplan partition``,
``pipeplan simulate --profile`` and ``pipeplan run --profile``; ``--out`` does
not replace a profile computed from shapes (``pipeplan model``) unless ``--force``.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.table import Table

from .._validation import positive_float, positive_int
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..limits import MAX_LOCAL_BATCH, MAX_LOCAL_PROCESSES
from ..profile_format import check_overwrite
from ..units import format_bytes
from ._common import default_microbatches, make_console, print_json, progress, refuse_unless, report_written, require_torch

__all__ = ["register", "run", "warn_profile_load"]


def warn_profile_load(profile: LayerProfile, path: str) -> str | None:
    """Print on stderr, as one line, :func:`pipeplan.calibration.load_warning` of ``profile`` when it has one.

    Used where a profile is measured (``profile``) and where one is used (``simulate --profile``,
    ``run --profile``); returns the line (``None``: nothing printed).
    """
    import sys

    from ..calibration import load_warning

    line = load_warning(profile.measurement, profile.calibration)
    if line is not None:
        line = f"warning: profile {path}: {line}"
        print(line, file=sys.stderr)
    return line


def register(subparsers: Any) -> None:
    """Add the ``profile`` verb."""
    parser = subparsers.add_parser(
        "profile",
        help="measure a model's layers and this machine into a profile file",
        description="Measure per-layer F, B (the full backward), I (its input-gradient part), W (its "
                    "weight-gradient part), bytes and parameters as the runtime runs them, and the link and core sharing of this machine, into a JSON or CSV profile file.",
    )
    parser.add_argument("--model", default=None,
                        help="package.module:factory, or a built-in model: vla (default), dumbbell")
    parser.add_argument("--layers", type=int, default=8, help="transformer blocks of a built-in model (default 8)")
    parser.add_argument("--batch-size", type=int, default=16,
                        help="samples per step, not per microbatch: the microbatch measured is --batch-size / -m "
                             "(default 16)")
    parser.add_argument("-m", "--microbatches", type=int, default=None,
                        help="microbatches per step; one microbatch is measured (default 2 × --nproc, the "
                             "pipeline ranks)")
    parser.add_argument("--nproc", type=int, default=2,
                        help="processes the run will use: sets threads per process and the calibration (default 2)")
    parser.add_argument("--repeats", type=int, default=7, help="timed runs per measurement (default 7)")
    parser.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    parser.add_argument("--statistic", choices=("median", "min"), default="median",
                        help="what each time is of its repeats: median (default) or min, the fastest run "
                             "(on a shared machine: the run least slowed by others; the spread check is skipped, "
                             "since others' load is what min looks past)")
    parser.add_argument("--max-spread", type=float, default=None,
                        help="under the median, refuse when a layer's interquartile range exceeds this fraction "
                             "of its F + B (default 0.5; not with --statistic min, which keeps each time's fastest "
                             "run and checks no spread)")
    parser.add_argument("--no-calibrate", action="store_true", help="skip the link and core-sharing calibration")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo",
                        help="process-group backend of the calibration (default gloo)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds for the calibration ranks (default 120)")
    parser.add_argument("--out", required=True, help="the profile file to write, .json or .csv")
    parser.add_argument("--force", action="store_true",
                        help="let --out replace a profile of another origin (one pipeplan model computed from shapes)")
    parser.add_argument("--json", action="store_true", help="print the profile as JSON")
    parser.set_defaults(func=run)


_REPEATS_WHY = "runs per measurement; more only lengthen it"


_NPROC_WHY = "processes on this machine, each importing torch"
_BATCH_WHY = "examples per step of a model measured on this machine"

def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan profile``."""
    if not str(args.out).lower().endswith((".json", ".csv")):
        raise InvalidInputError(f"--out must end in .json or .csv, got {args.out!r}")
    if not args.force:
        check_overwrite(Path(args.out), "measured")
    refuse_unless(args.statistic != "min" or args.max_spread is None, "--max-spread",
                  "with --statistic min (the fastest run of each time is kept; no spread is checked)")
    spread = positive_float("--max-spread", 0.5 if args.max_spread is None else args.max_spread)
    nproc = positive_int("--nproc", args.nproc, maximum=MAX_LOCAL_PROCESSES, why=_NPROC_WHY)
    from ..limits import MAX_REPEATS, check_builtin_model_size
    from ..models import BUILTIN_MODELS

    layers = positive_int("--layers", args.layers)
    if args.model is None or args.model in BUILTIN_MODELS:
        check_builtin_model_size(layers, nproc)
    require_torch("pipeplan profile")
    from ..runtime.loop import profile_model

    batch_size = positive_int("--batch-size", args.batch_size, maximum=MAX_LOCAL_BATCH, why=_BATCH_WHY)
    if args.microbatches is not None and positive_int("-m", args.microbatches) > batch_size:
        raise InvalidInputError(f"--batch-size must be >= the {args.microbatches} microbatches (-m), got {batch_size}")
    what = f"measuring {args.model or 'the built-in model'}'s layers" + ("" if args.no_calibrate else
                                                                          f" and {nproc} ranks' links")
    try:
        with progress(1, what):  # a spinner and the time elapsed on a terminal, once past a second
            profile = profile_model(
                args.model,
                layers=layers,
                batch_size=batch_size,
                microbatches=positive_int("-m", default_microbatches(args.microbatches, nproc, batch_size=batch_size)),
                nproc=nproc,
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
        warn_profile_load(profile, args.out)  # last: what the reader should see
        report_written(args.out)
        return 0
    console = make_console()
    notes = profile.measurement
    kept = (f"min of {notes.get('repeats')} runs, ± their IQR" if notes.get("statistic") == "min"
            else f"median of {notes.get('repeats')} runs ± IQR")
    table = Table(title=f"profile of {notes.get('model')} (ms per microbatch of {notes.get('microbatch_size')}, "
                        f"{kept})")
    for column in ("layer", "F", "B (full)", "I", "W", "activations", "send", "params"):
        table.add_column(column, justify="left" if column == "layer" else "right")
    assert profile.backward_input is not None
    for index, name in enumerate(profile.names):
        def cell(key: str, value: float) -> str:
            return f"{value:.3f} ± {profile.spread[key][index]:.3f}" if key in profile.spread else f"{value:.3f}"

        table.add_row(
            name, cell("forward", profile.forward[index]), cell("backward", profile.backward[index]),
            cell("backward_input", profile.backward_input[index]), cell("weight", profile.weight[index]),
            format_bytes(profile.activation_bytes[index]), format_bytes(profile.send_bytes[index]),
            f"{profile.params[index]:,.0f}",
        )
    console.print(table)
    calibration = profile.calibration
    if calibration is not None:
        console.print(
            f"calibration ({calibration.backend}, {profile.measurement.get('nproc')} processes x "
            f"{profile.measurement.get('threads_per_process')} thread(s)): {calibration.describe_link()}; "
            "core sharing slowdown "
            + ", ".join(f"{k + 1} busy x{factor:.2f}" for k, factor in enumerate(calibration.slowdown)),
            markup=False, highlight=False,
        )
    load = profile.measurement.get("loadavg_before")
    if load:
        console.print(f"load average {load[0]:.2f} before measuring", markup=False, highlight=False)
    warn_profile_load(profile, args.out)  # last: what the reader should see
    report_written(args.out)
    return 0

"""Options, the table header and the run loop shared by the benchmarks that run pipelines (fidelity, rebalance).

    from _pipeline_args import measure_and_record, pipeline_parser, run_line
    args = pipeline_parser(__doc__, batch_size=32, microbatches=8, doc_path=DOC).parse_args()
    results = measure_and_record(args, one_config, table, "fidelity-table")  # --write records it
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from _markers import add_write_flag, measured_line, replace_between


def pipeline_parser(doc: str, *, batch_size: int, microbatches: int, doc_path: Path, steps: int = 15,
                    repeats: int = 21) -> argparse.ArgumentParser:
    """Runs, process counts, model and step sizes, backend and where the table goes.

    The defaults measure over seconds, not a fraction of one: on a shared VM the
    same work alone can take half again as long from one second to the next
    (the speed probe of ``benchmarks/fidelity.py``), so a profile of 21 rounds and
    a median over 15 steps estimate the machine's typical speed rather than one
    moment of it.
    """
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per configuration (default 3)")
    parser.add_argument("--nproc", default="2,4", help="process counts, comma-separated (default 2,4)")
    parser.add_argument("--layers", type=int, default=8, help="transformer blocks of the model (default 8)")
    parser.add_argument("--batch-size", type=int, default=batch_size)
    parser.add_argument("-m", "--microbatches", type=int, default=microbatches)
    parser.add_argument("--steps", type=int, default=steps, help=f"measured steps per run (default {steps})")
    parser.add_argument("--warmup", type=int, default=2, help="warm-up steps per run (default 2)")
    parser.add_argument("--repeats", type=int, default=repeats,
                        help=f"timed runs per profile measurement (default {repeats})")
    parser.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    add_write_flag(parser, doc_path)
    parser.add_argument("--doc", default=str(doc_path), help=f"the docs file to write (default {doc_path.name})")
    return parser


def started_now() -> str:
    """The UTC minute a benchmark started, as the tables print it."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")


def run_line(script: str, argv: list[str], started: str, backend: str) -> str:
    """The line under every table: when, on what, and the exact command (:func:`_markers.measured_line`)."""
    return measured_line(
        f"python benchmarks/{script}{' ' + ' '.join(argv) if argv else ''}",
        machine=f"torch {torch.__version__}, Python {platform.python_version()}, {os.cpu_count()} CPU cores, "
                f"backend {backend}",
        when=datetime.datetime.strptime(started, "%Y-%m-%d %H:%M UTC").replace(
            tzinfo=datetime.timezone.utc).timestamp(),
        clock=True,
    )


def measure_and_record(args: argparse.Namespace, one_config: Callable[[int, argparse.Namespace], Any],
                       table: Callable[[list[Any], argparse.Namespace, str], str], marker: str) -> list[Any]:
    """Run ``one_config`` for each ``--nproc`` count, print the table, and with ``--write`` record it.

    The table replaces the text between ``marker``'s markers in ``--doc``.
    Returns the per-configuration results.
    """
    started = started_now()
    results = [one_config(int(p), args) for p in args.nproc.split(",")]
    text = table(results, args, started)
    print(text)
    if args.write:
        replace_between(args.doc, marker, text)
    return results

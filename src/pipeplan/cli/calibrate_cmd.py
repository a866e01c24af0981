"""``pipeplan calibrate``: time this machine's accelerator and write a device file.

    $ pipeplan calibrate --out device.json              # CUDA GPU 0 (or torch's CPU kernels)
    $ pipeplan calibrate --out device.json --quick --no-p2p
    $ pipeplan plan --preset gpt-1.5b --gpus 8 --global-batch 64 --device device.json

Times a grid of GEMMs, attention, memory-bound kernels, kernel launches and a
point-to-point message sweep (:mod:`pipeplan.runtime.device_calibration`), fits
a :class:`~pipeplan.hardware.Device` to them (:mod:`pipeplan.hardware.fit`), prints
a short table and writes the file (:mod:`pipeplan.hardware.device_file`), which keeps the
raw timings in its ``measurement`` notes.
"""

from __future__ import annotations

import argparse
import datetime
from typing import Any

from rich.table import Table

from .._files import check_output_path
from .._validation import positive_int
from ..hardware.device_file import write_device
from ..hardware.fit import Timings, device_from_timings, link_from_timings
from ..limits import MAX_REPEATS
from ..units import format_bandwidth, format_bytes
from ._common import make_console, report_written, require_torch

__all__ = ["register", "run"]


def register(subparsers: Any) -> None:
    """Add the ``calibrate`` verb."""
    parser = subparsers.add_parser(
        "calibrate", help="time GEMMs, attention, memory-bound kernels and p2p here; write a device file",
        description="Time this machine's accelerator with torch (CUDA when available, else CPU kernels) and "
                    "write a device file that plan, model and partition read with --device.",
    )
    parser.add_argument("--out", required=True, metavar="FILE", help="the device file to write (.json)")
    parser.add_argument("--quick", action="store_true", help="smaller grids and 3 repeats (seconds, not a minute)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed samples per kernel, median kept "
                             "(default 3 with --quick, else 10 on CUDA, 5 on CPU)")
    parser.add_argument("--no-p2p", action="store_true", help="skip the point-to-point message sweep")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Entry of ``pipeplan calibrate``."""
    check_output_path(args.out, "--out")
    if args.repeats is not None:
        positive_int("--repeats", args.repeats, maximum=MAX_REPEATS, why="more only lengthen the calibration")
    require_torch("pipeplan calibrate")
    import torch

    from ..runtime.device_calibration import time_device

    notes: list[str] = []
    started = datetime.datetime.now(datetime.timezone.utc)
    timings = time_device(quick=args.quick, repeats=args.repeats, p2p=not args.no_p2p, notes=notes)
    device = device_from_timings(timings)
    link = link_from_timings(timings)
    measurement = {
        "torch": torch.__version__, "device_name": timings.device_name, "dtype": timings.dtype,
        "started": started.isoformat(timespec="seconds"), "quick": args.quick, "repeats": args.repeats,
        "notes": notes + (["p2p skipped: --no-p2p"] if args.no_p2p else []), "timings": timings.to_dict(),
    }
    write_device(args.out, device, p2p=link, measurement=measurement)
    _print(timings, device, link, notes, args.out)
    return 0


def _print(timings: Timings, device: Any, link: Any, notes: list[str], out: str) -> None:
    console = make_console()
    launch_s = device.launch_overhead_ms / 1e3
    table = Table(title=f"{timings.device_name} ({timings.dtype}): peak {device.peak_flops / 1e12:.4g} TFLOP/s, "
                        f"memory {format_bandwidth(device.memory_bandwidth / 1e3)}")
    for column in ("kernel", "shape / bytes", "time ms", "achieved", "efficiency"):
        table.add_column(column, justify="left" if column in ("kernel", "shape / bytes") else "right")
    for gemm, point in zip(timings.gemms, device.gemm_table):
        table.add_row("GEMM", f"{gemm.m}×{gemm.n}×{gemm.k}", f"{gemm.seconds * 1e3:.4g}",
                      f"{gemm.flops / gemm.seconds / 1e12:.4g} TFLOP/s", f"{point.efficiency:.1%}")
    for attention in timings.attention:
        rate = attention.flops / attention.seconds
        table.add_row("attention" + (" causal" if attention.causal else ""),
                      f"b{attention.batch} h{attention.heads} s{attention.seq_length} d{attention.head_dim}",
                      f"{attention.seconds * 1e3:.4g}", f"{rate / 1e12:.4g} TFLOP/s", f"{rate / device.peak_flops:.1%}")
    for kernel in timings.memory:
        rate = kernel.bytes / kernel.seconds
        table.add_row(kernel.kernel, format_bytes(kernel.bytes), f"{kernel.seconds * 1e3:.4g}",
                      format_bandwidth(rate / 1e3), f"{rate / device.memory_bandwidth:.1%}")
    console.print(table)
    console.print(f"GEMM efficiency {device.gemm_efficiency:.1%} (largest shapes), attention "
                  f"{device.attention_efficiency:.1%}, memory {device.memory_efficiency:.1%}, launch "
                  f"{launch_s * 1e6:.3g} µs per kernel")
    if link is not None:
        console.print(f"p2p: {link.latency_ms * 1e3:.3g} µs + bytes / {format_bandwidth(link.bandwidth / 1e3)} "
                      f"({len(timings.p2p)} sizes)")
    for note in notes:
        console.print(note)
    report_written(out)

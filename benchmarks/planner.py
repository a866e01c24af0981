"""The planner's numbers: search time, distance to the lower bound, speed-up over Megatron-LM's default.

    python benchmarks/planner.py            # print the tables
    python benchmarks/planner.py --write    # also record them in docs/planner.md
    python benchmarks/planner.py --only baseline --write

What it runs (the default search of ``pipeplan plan``: every pp dividing the GPU
count, every micro-batch size, every schedule with interleaved v ≤ 4, recompute
where memory needs it, 16-byte Adam, eager messages, H100 80GB with NVLink in a
node and InfiniBand NDR between nodes, global batch 256):

* **speed**: ``pi0`` on 8 GPUs and ``driving-6cam`` on 32. CPU seconds of the
  search (``time.process_time``, the least of ``--repeats`` runs; the machine is
  shared, so CPU time is the number to compare with the 10 s target) and wall seconds;
* **quality**: every preset on 8 GPUs (``driving-6cam`` on 32): the best plan's
  step time ÷ the search's lower bound (total work ÷ GPUs plus the unavoidable fill, the least
  heaviest rank and the least all-reduce; docs/planner.md);
* **baseline**: the best plan vs the Megatron-LM default it reports (even split,
  1F1B, same pp, dp, micro-batch size and m, no recompute), for ``pi0`` at pp = 4
  and for ``driving-6cam``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import replace_between  # noqa: E402

from pipeplan import presets  # noqa: E402
from pipeplan.planner import Cluster, Workload, search  # noqa: E402

GPU = "h100-80g"
BATCH = 256
GPUS = {"driving-6cam": 32}  # every other preset: 8


def run(preset: str, gpus: int, *, pp: int | None = None, batch: int = BATCH) -> tuple[object, float, float]:
    """One default search: ``(result, cpu seconds, wall seconds)``."""
    cluster = Cluster.of(GPU, gpus)
    workload = Workload.from_spec(presets.get(preset), cluster.device)
    cpu, wall = time.process_time(), time.perf_counter()
    result = search(workload, cluster, batch, pp=pp)
    return result, time.process_time() - cpu, time.perf_counter() - wall


def describe(plan) -> str:  # type: ignore[no-untyped-def]
    schedule = plan.schedule_label
    modes = sorted(set(plan.recompute))
    return (f"pp={plan.pp}×dp={plan.dp}, {schedule}, b={plan.micro_batch_size}, m={plan.num_microbatches}, "
            f"recompute {'/'.join(modes)}")


def speed_table(repeats: int) -> str:
    rows = ["| model | GPUs | CPU s (min of runs) | wall s | candidates | partitions | simulated | pruned | best |",
            "|---|---|---|---|---|---|---|---|---|"]
    for preset, gpus in (("pi0", 8), ("driving-6cam", 32)):
        runs = [run(preset, gpus) for _ in range(repeats)]
        result, cpu, wall = min(runs, key=lambda r: r[1])
        stats = result.stats  # type: ignore[attr-defined]
        rows.append(f"| {preset} | {gpus} | {cpu:.2f} | {wall:.2f} | {stats.candidates} | {stats.partitions} | "
                    f"{stats.simulated} | {stats.pruned} | {describe(result.best)} |")  # type: ignore[attr-defined]
    return "\n".join(rows)


def quality_table() -> str:
    rows = ["| model | GPUs | batch | best step ms | of which all-reduce | lower bound ms | best ÷ bound | "
            "bound, one stage per rank | best ÷ it | Megatron default ms | × default | best plan |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    cases = [(preset, GPUS.get(preset, 8), BATCH) for preset in presets.names()]
    cases.append(("driving-6cam", 32, 1024))  # the same model with 4× the microbatches per pipeline
    for preset, gpus, batch in cases:
        result, _, _ = run(preset, gpus, batch=batch)
        best, base = result.best, result.baseline  # type: ignore[attr-defined]
        ratio = result.ratio(best)  # type: ignore[attr-defined]
        fits = "" if base.fits else " (over memory)"
        bound = result.lower_bound  # type: ignore[attr-defined]
        single = result.single_stage_bound  # type: ignore[attr-defined]
        rows.append(f"| {preset} | {gpus} | {batch} | {best.step_time:.1f} | {best.dp_comm_time:.1f} | {bound:.1f} | "
                    f"{best.step_time / bound:.3f} | {single:.1f} | {best.step_time / single:.3f} | "
                    f"{base.step_time:.1f}{fits} | {ratio:.2f}× | {describe(best)} |")
    return "\n".join(rows)


def walkthrough() -> str:
    """The ranked table of ``pipeplan plan --preset pi0 --gpus 8 --gpu h100-80g --global-batch 256 --pp 4``."""
    from rich.console import Console

    from pipeplan.viz import plan_table

    result, _, _ = run("pi0", 8, pp=4)
    console = Console(record=True, width=220, file=open(os.devnull, "w"))
    console.print(plan_table(result))  # type: ignore[arg-type]
    return "```text\n" + console.export_text().rstrip() + "\n```"


def baseline_table() -> str:
    rows = ["| model | GPUs | pp | best step ms | best plan | Megatron default ms | default plan | × default | "
            "default made to fit (recompute) ms | × it |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    for preset, gpus, pp in (("pi0", 8, 4), ("driving-6cam", 32, None), ("driving-6cam", 32, 4)):
        result, _, _ = run(preset, gpus, pp=pp)
        best, base = result.best, result.baseline  # type: ignore[attr-defined]
        fits = "" if base.fits else ", over memory"
        fitting = base if base.fits else result.one_knob.get("recompute")  # type: ignore[attr-defined]
        made_fit = "—" if fitting is None else (
            f"{fitting.step_time:.1f} ({'/'.join(sorted(set(fitting.recompute)))}) | "
            f"{fitting.step_time / best.step_time:.2f}×")
        rows.append(f"| {preset} | {gpus} | {pp or 'searched'} | {best.step_time:.1f} | {describe(best)}, layers "
                    f"{list(best.layers_per_stage)} | {base.step_time:.1f} | layers {list(base.layers_per_stage)}{fits} | "
                    f"{result.ratio(best):.2f}× | {made_fit} |")  # type: ignore[attr-defined]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="record the tables in docs/planner.md")
    parser.add_argument("--repeats", type=int, default=2, help="speed runs per model (the least CPU time counts)")
    parser.add_argument("--only", choices=("speed", "quality", "baseline", "walkthrough"), default=None,
                        help="run (and with --write, record) one table only")
    args = parser.parse_args()
    machine = (f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores "
               f"({platform.machine()}), shared with other jobs while measured")
    makers = {"speed": lambda: f"Measured on {machine}.\n\n{speed_table(args.repeats)}",
              "quality": quality_table, "baseline": baseline_table, "walkthrough": walkthrough}
    docs = Path(__file__).resolve().parent.parent / "docs" / "planner.md"
    for name, make in makers.items():
        if args.only not in (None, name):
            continue
        text = make()
        print(f"## {name}\n{text}\n")
        if args.write:
            replace_between(docs, f"planner-{name}", text)


if __name__ == "__main__":
    main()

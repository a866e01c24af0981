"""The planner's numbers: search time, the best plan against the baselines users run, distance to the lower bound.

    python benchmarks/planner.py            # print the tables
    python benchmarks/planner.py --write    # also record them in docs/planner.md
    python benchmarks/planner.py --only clusters --write    # one table (speed, clusters or walkthrough)

What it runs (the default search of ``pipeplan plan``: every tp dividing a node,
every pp, every data-parallel mode, every micro-batch size, every schedule with
interleaved v ≤ 4, recompute where memory needs it, Adam, Megatron-LM's default
gradient reduction for ddp/zero1/zero2, eager messages, global batch 256):

* **speed**: ``pi0`` on 8 H100s and ``driving-6cam`` on 32. CPU seconds of the
  search (``time.process_time``, the least of ``--repeats`` runs; the machine is
  shared, so CPU time is the number to compare with the targets) and wall seconds;
* **clusters**: every preset on 8, 32 and 64 H100 80GB (NVLink in a node,
  InfiniBand NDR between nodes) and on 8 and 32 A100 80GB (NVLink, RoCE 400G
  between nodes): the best plan, both baselines (``reference-fsdp``: what the
  model's repository runs; ``megatron-recommended``: the least model parallelism
  that fits), the best plan's ratio to the better baseline that fits, and its
  step time ÷ the search's lower bound (docs/planner.md);
* **walkthrough**: the ranked table of ``pipeplan plan --preset pi0 --gpus 8 --global-batch 256``.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, computed_line, measured_line, replace_between, run_command  # noqa: E402

from pipeplan import presets  # noqa: E402
from pipeplan.planner import Cluster, SearchOptions, Workload, search  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "planner.md"
GPU = "h100-80g"
BATCH = 256
#: (device, GPUs, link between nodes) of the clusters table (issue 20's list)
CLUSTERS = (("h100-80g", 8, "ib-ndr"), ("h100-80g", 32, "ib-ndr"), ("h100-80g", 64, "ib-ndr"),
            ("a100-80g", 8, "roce-400g"), ("a100-80g", 32, "roce-400g"))


def run(preset: str, gpus: int, *, gpu: str = GPU, inter: str = "ib-ndr", pp: int | None = None,
        batch: int = BATCH) -> tuple[object, float, float]:
    """One default search: ``(result, cpu seconds, wall seconds)``."""
    cluster = Cluster.of(gpu, gpus, inter_node=inter)
    workload = Workload.from_spec(presets.get(preset), cluster.device, tp_link=cluster.intra_node)
    cpu, wall = time.process_time(), time.perf_counter()
    result = search(workload, cluster, batch, SearchOptions(pp=pp))
    return result, time.process_time() - cpu, time.perf_counter() - wall


def describe(plan) -> str:  # type: ignore[no-untyped-def]
    """``tp1·pp4·dp2 zero1, zb-v, b=8, m=16, recompute none``."""
    modes = "/".join(sorted(set(plan.recompute)))
    mode = plan.dp_mode if plan.dp > 1 else "—"
    return (f"tp{plan.tp}·pp{plan.pp}·dp{plan.dp} {mode}, {plan.schedule_label}, b={plan.micro_batch_size}, "
            f"m={plan.num_microbatches}, recompute {modes}")


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


def _cluster_row(case: tuple[str, str, int, str]) -> str:
    preset, gpu, gpus, inter = case
    try:
        result, cpu, _ = run(preset, gpus, gpu=gpu, inter=inter)
    except Exception as error:  # noqa: BLE001 - a row that cannot be planned says why
        return f"| {preset} | {gpus} × {gpu} | — | {str(error)[:120]} | | | | | | |"
    best = result.best  # type: ignore[attr-defined]
    cells = []
    for baseline in result.baselines:  # type: ignore[attr-defined]
        if baseline.plan is None:
            cells.append("—")
        elif not baseline.fits:
            cells.append(f"over memory ({describe(baseline.plan)})")
        else:
            cells.append(f"{baseline.step_time:.1f} ({describe(baseline.plan)})")
    ratio = result.ratio_to_best_baseline(best)  # type: ignore[attr-defined]
    gap = best.step_time / result.lower_bound  # type: ignore[attr-defined]
    never_slower = all(b.step_time is None or best.step_time <= b.step_time * (1 + 1e-9)
                       for b in result.baselines)  # type: ignore[attr-defined]
    return (f"| {preset} | {gpus} × {gpu} | {best.step_time:.1f} | {describe(best)} | {cells[0]} | {cells[1]} | "
            f"{'—' if ratio is None else f'{ratio:.2f}×'} | {'yes' if never_slower else 'NO'} | {gap:.3f} | "
            f"{cpu:.1f} |")


def cluster_cases(models: tuple[str, ...] = ()) -> list[tuple[str, str, int, str]]:
    """``(preset, device, GPUs, link between nodes)`` of the clusters table: every preset, or ``models``."""
    return [(preset, gpu, gpus, inter) for preset in presets.names() if not models or preset in models
            for gpu, gpus, inter in CLUSTERS]


def clusters_table(cases: list[tuple[str, str, int, str]] | None = None, processes: int = 2) -> str:
    """One row per case of :func:`cluster_cases` (default every preset), in ``processes`` processes."""
    rows = ["| model | cluster | best ms | best plan | reference-fsdp ms | megatron-recommended ms | "
            "× best baseline | never slower | best ÷ bound | CPU s |",
            "|---|---|---|---|---|---|---|---|---|---|"]
    cases = cluster_cases() if cases is None else cases
    if processes > 1:
        from multiprocessing import Pool

        with Pool(processes) as pool:
            rows += pool.map(_cluster_row, cases)
    else:
        rows += [_cluster_row(case) for case in cases]
    return "\n".join(rows)


def walkthrough() -> str:
    """The ranked table of ``pipeplan plan --preset pi0 --gpus 8 --gpu h100-80g --global-batch 256``."""
    from rich.console import Console

    from pipeplan.planner.resolution import tie_leaders
    from pipeplan.viz import plan_table
    from pipeplan.viz.plans import plan_legend

    result, _, _ = run("pi0", 8)
    console = Console(record=True, width=240, file=open(os.devnull, "w"))
    ties = tie_leaders([plan.step_time for plan in result.plans])
    console.print(plan_table(result, ties=ties))  # type: ignore[arg-type]
    from pipeplan.planner import DEFAULT_HEADROOM
    from pipeplan.units import format_capacity

    capacity = format_capacity(Cluster.of(GPU, 8).memory_bytes, headroom=DEFAULT_HEADROOM)
    for line in plan_legend(result, capacity=capacity, ties=ties):
        console.print(line, markup=False, highlight=False)
    return "```text\n" + console.export_text().rstrip() + "\n```"


#: What tests/test_docs_tables.py checks of the clusters table (the CPU s column is measured).
CLUSTERS_CHECKED = "every column but CPU s of the smolvla rows (of every row with `PIPEPLAN_DOCS_TABLES=all`)"


def command(name: str) -> str:
    """The command that rewrites one table of docs/planner.md."""
    return f"python benchmarks/planner.py --only {name} --write"


def walkthrough_block() -> str:
    """What ``--write`` records between the ``planner-walkthrough`` markers (tests/test_docs_tables.py checks it)."""
    return f"{walkthrough()}\n\n{computed_line(command('walkthrough'))}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser, DOC)
    parser.add_argument("--repeats", type=int, default=2, help="speed runs per model (the least CPU time counts)")
    parser.add_argument("--only", choices=("speed", "clusters", "walkthrough"), default=None,
                        help="run (and with --write, record) one table only")
    args = parser.parse_args()
    machine = (f"{platform.python_implementation()} {platform.python_version()}, {os.cpu_count()} cores "
               f"({platform.machine()}), shared with other jobs while measured")
    makers = {"speed": lambda: f"{speed_table(args.repeats)}\n\n{measured_line(run_command(), machine=machine)}",
              "clusters": lambda: (f"{clusters_table()}\n\n"
                                   f"{measured_line(run_command(), machine=machine, checked=CLUSTERS_CHECKED)}"),
              "walkthrough": walkthrough_block}
    for name, make in makers.items():
        if args.only not in (None, name):
            continue
        text = make()
        print(f"## {name}\n{text}\n")
        if args.write:
            replace_between(DOC, f"planner-{name}", text)


if __name__ == "__main__":
    main()

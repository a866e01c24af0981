"""Bytes of memory per action and per Gantt cell: the numbers behind ``pipeplan.limits``.

    python benchmarks/action_memory.py            # print the table
    python benchmarks/action_memory.py --write    # also record it in docs/simulator.md

Each case runs in a fresh process and reports the growth of its peak resident set
(``ru_maxrss``) over the process after imports, divided by the number of actions
(or Gantt cells): building the schedule, then simulating it, then the views the
CLI prints. ``pipeplan.limits`` multiplies these by a schedule's size and refuses
a size whose estimate exceeds the memory available; keep its constants at or above
the largest measured value here.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent

# (schedule, stages, microbatches): about a million actions for the fixed orders; adaptive
# builds and simulates ~15 candidate orders and is quadratic in m, so a smaller case.
CASES = (("1f1b", 8, 65536), ("1f1b", 1000, 512), ("gpipe", 4, 131072), ("zb-v", 8, 32768),
         ("interleaved", 8, 32768), ("adaptive", 8, 256))
GANTT_WIDTH = 2_000_000

_CHILD = r"""
import io, json, resource, sys
import pipeplan
from pipeplan.viz import rank_table, text_gantt
from rich.console import Console

def rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB

name, stages, micro, width = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
costs = pipeplan.StageCosts.uniform(stages, forward=1.0)
text_gantt(pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2),
                             pipeplan.StageCosts.uniform(2)))  # warm every code path
base = rss()
options = {"costs": costs} if name == "adaptive" else {}
if name == "interleaved":
    options = {"virtual_stages": 2}
schedule = pipeplan.build_schedule(name, num_stages=stages, num_microbatches=micro, **options)
built = rss()
timeline = pipeplan.simulate(schedule, costs)
simulated = rss()
console = Console(file=io.StringIO(), width=200)
console.print(text_gantt(timeline, width=width), markup=False, highlight=False, soft_wrap=True)
console.print(rank_table(timeline))
viewed = rss()
print(json.dumps({"actions": schedule.num_actions, "ranks": schedule.num_ranks, "build": built - base,
                  "simulate": simulated - base, "views": viewed - base}))
"""


def measure(name: str, stages: int, micro: int, width: int) -> dict[str, float]:
    """Peak RSS growth of one case, run in a fresh interpreter."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    out = subprocess.run([sys.executable, "-c", _CHILD, name, str(stages), str(micro), str(width)],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_write_flag(parser, ROOT / "docs" / "simulator.md")
    args = parser.parse_args()
    rows = []
    for name, stages, micro in CASES:
        result = measure(name, stages, micro, 100)
        per = {key: result[key] / result["actions"] for key in ("build", "simulate", "views")}
        rows.append(f"| {name} | {stages} | {micro} | {result['actions']:,} | {per['build']:.0f} | "
                    f"{per['simulate']:.0f} | {per['views']:.0f} |")
    small = measure("1f1b", 4, 8, 100)
    wide = measure("1f1b", 4, 8, GANTT_WIDTH)
    cells = (GANTT_WIDTH + 1) * (wide["ranks"] + 1)  # rank lines and the axis
    per_cell = (wide["views"] - small["views"]) / cells
    header = (
        "Peak resident set growth per action, cumulative: build, then + simulate, then + the Gantt and rank "
        "table.\n\n"
        "| schedule | stages | m | actions | build B/action | + simulate | + views |\n"
        "|---|---|---|---|---|---|---|"
    )
    machine = f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"
    table = (header + "\n" + "\n".join(rows) + f"\n\nText Gantt {GANTT_WIDTH:,} columns wide: "
             f"{per_cell:.1f} bytes per cell (rank lines and axis, printed without wrapping).\n\n"
             + measured_line(run_command(), machine=machine))
    print(table)
    if args.write:
        replace_between(ROOT / "docs" / "simulator.md", "action-memory", table)


if __name__ == "__main__":
    main()

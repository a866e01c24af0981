"""How many actions per second the simulator handles (target: >= 1,000,000 on 1F1B P = 64, m = 1024).

    python benchmarks/simulate_speed.py            # print the table
    python benchmarks/simulate_speed.py --write    # also record it in docs/simulator.md

Times 1F1B with unequal stage costs in CPU seconds (``time.process_time``, best of
``--repeats``; the machine is shared, so CPU time is steadier than wall time):

* build: ``build_schedule``; validate: ``Schedule.validate()`` on a fresh schedule;
* first: the first ``simulate`` of a validated schedule (compiles the schedule's
  integer form once; eager sends replay validation's order, rendezvous sends run the
  event-driven kernel and record theirs);
* again: a later ``simulate`` of the same schedule with other costs (what a search
  over costs, partitions or communication pays per call);
* fresh: ``simulate(..., validate=False)`` of a schedule never simulated or validated
  (lowering, compiling and the event-driven kernel);
* reference: the previous implementation (``tests/_reference_simulate.py``), eager, and
  the previous validation (the per-action checks ``validate`` still runs to name a fault),
  which the previous ``simulate`` ran on every call.

Actions per second are for "again" unless named.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402
from _reference_simulate import reference_times  # noqa: E402

import pipeplan  # noqa: E402

CASES = ((8, 64), (16, 64), (64, 1024))


def cpu_best(repeats: int, setup: Callable[[], object], call: Callable[[object], object]) -> float:
    """Smallest CPU time of ``call(setup())`` over ``repeats`` runs (setup not timed), seconds."""
    best = float("inf")
    for _ in range(repeats):
        prepared = setup()
        begin = time.process_time()
        call(prepared)
        best = min(best, time.process_time() - begin)
    return best


def measure(stages: int, microbatches: int, repeats: int) -> dict[str, float]:
    rng = np.random.default_rng(0)
    forward = rng.uniform(5, 30, stages)
    costs = [pipeplan.StageCosts(forward * rng.uniform(0.9, 1.1, stages), 2 * forward) for _ in range(2)]
    built = pipeplan.build_schedule("1f1b", num_stages=stages, num_microbatches=microbatches)

    def fresh() -> pipeplan.Schedule:
        return pipeplan.Schedule(built.orders, built.placement, microbatches, name="1f1b")

    def validated() -> pipeplan.Schedule:
        return fresh().validate()

    eager = pipeplan.CommModel(latency=0.1)
    rendezvous = pipeplan.CommModel(latency=0.1, send_mode="rendezvous")
    out: dict[str, float] = {"actions": float(built.num_actions)}
    out["build"] = cpu_best(repeats, lambda: None, lambda _: pipeplan.build_schedule(
        "1f1b", num_stages=stages, num_microbatches=microbatches))
    out["validate"] = cpu_best(repeats, fresh, lambda s: s.validate())
    for name, comm in (("eager", eager), ("rendezvous", rendezvous)):
        out[f"{name} first"] = cpu_best(repeats, validated, lambda s: pipeplan.simulate(s, costs[0], comm))

        def warmed(comm: pipeplan.CommModel = comm) -> pipeplan.Schedule:
            schedule = validated()
            pipeplan.simulate(schedule, costs[0], comm)
            pipeplan.simulate(schedule, costs[0], comm)
            return schedule

        out[f"{name} again"] = cpu_best(repeats, warmed, lambda s: pipeplan.simulate(s, costs[1], comm))
        out[f"{name} fresh"] = cpu_best(repeats, fresh,
                                        lambda s: pipeplan.simulate(s, costs[0], comm, validate=False))
    out["reference"] = cpu_best(max(1, repeats // 2), lambda: built, lambda s: reference_times(s, costs[0], eager))

    def old_validate(schedule: pipeplan.Schedule) -> None:
        schedule._validate_each_action()
        schedule._check_deadlock_free()

    out["reference validate"] = cpu_best(max(1, repeats // 2), fresh, old_validate)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    doc = Path(__file__).resolve().parent.parent / "docs" / "simulator.md"
    add_write_flag(parser, doc)
    args = parser.parse_args()
    rows = []
    for stages, microbatches in CASES:
        r = measure(stages, microbatches, args.repeats)
        n = r["actions"]
        rows.append(
            f"| {stages} | {microbatches} | {int(n):,} | {r['build']:.3f} | {r['validate']:.3f} | "
            f"{r['eager first']:.3f} | {r['eager again']:.3f} | **{n / r['eager again']:,.0f}** | "
            f"{r['rendezvous first']:.3f} | {r['rendezvous again']:.3f} | **{n / r['rendezvous again']:,.0f}** | "
            f"{r['eager fresh']:.3f} ({n / r['eager fresh']:,.0f}/s) | {r['rendezvous fresh']:.3f} | "
            f"{r['reference']:.3f} ({n / r['reference']:,.0f}/s) | {r['reference validate']:.3f} |"
        )
    header = (
        f"CPU seconds, best of {args.repeats}.\n\n"
        "| P | m | actions | build | validate | eager first | eager again | eager actions/s | "
        "rendezvous first | rendezvous again | rendezvous actions/s | eager fresh | rendezvous fresh | "
        "previous simulator (eager) | previous validate |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"
    )
    machine = f"{platform.machine()}, {os.cpu_count()} cores shared with other jobs, Python {platform.python_version()}"
    table = header + "\n" + "\n".join(rows) + "\n\n" + measured_line(run_command(), machine=machine)
    print(table)
    if args.write:
        replace_between(doc, "simulate-speed", table)


if __name__ == "__main__":
    main()

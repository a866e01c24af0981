"""Which of adaptive's list-scheduling rules ever win, on a seeded corpus of problems.

For every problem (random, uniform and dumbbell costs; one stage per rank, looped and V
placements; no limit, p and 2p microbatches per rank; eager messages) it simulates every
candidate ``adaptive_candidates`` builds and counts, per objective, the rules that are
the best (up to a relative 1e-6) and the ones that are the *only* best. A rule that
never wins alone and is always tied by another could be dropped; the greedy cover at
the end is the smallest set of rules found that keeps every problem's best::

    python benchmarks/adaptive_rules.py --problems 80
"""

from __future__ import annotations

import argparse
import collections
import random

from pipeplan import CommModel, StageCosts
from pipeplan.schedules.adaptive import adaptive_candidates, minimum_memory_limit
from pipeplan.schedules.zb_v import zb_v_placement


def problems(count: int, seed: int = 0):
    rng = random.Random(seed)
    for _ in range(count):
        ranks = rng.choice([2, 3, 4, 6, 8])
        layout = rng.choice(["one", "looped", "v"])
        stages = ranks if layout == "one" else 2 * ranks
        if layout == "one":
            placement = list(range(ranks))
        elif layout == "looped":
            placement = [s % ranks for s in range(stages)]
        else:
            placement = list(zb_v_placement(ranks))
        shape = rng.choice(["uniform", "dumbbell", "random"])
        if shape == "uniform":
            forward = [1.0] * stages
        elif shape == "dumbbell":
            forward = [3.0] + [1.0] * (stages - 2) + [2.0]
        else:
            forward = [rng.uniform(0.5, 3.0) for _ in range(stages)]
        backward = [f * rng.uniform(1.5, 2.5) for f in forward]
        weight = [b * rng.uniform(0.2, 0.5) for b in backward]
        costs = StageCosts(forward, backward, weight, weight_stash_bytes=[0.4] * stages)
        comm = CommModel(latency=rng.choice([0.0, 0.05, 0.2]))
        factor = rng.choice([None, 1, 2])
        limit = None if factor is None else max(factor * ranks, minimum_memory_limit(costs, placement))
        yield stages, rng.choice([ranks, 2 * ranks, 4 * ranks]), costs, comm, placement, limit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=80)
    args = parser.parse_args()
    value = {"makespan": lambda t: t.makespan, "span": lambda t: float(t.spans.max())}
    wins = {objective: collections.Counter() for objective in value}
    alone = {objective: collections.Counter() for objective in value}
    winners: dict[str, list[set[str]]] = {objective: [] for objective in value}
    labels: set[str] = set()
    for stages, microbatches, costs, comm, placement, limit in problems(args.problems):
        candidates = [c for c in adaptive_candidates(stages, microbatches, costs=costs, comm=comm,
                                                     memory_limit=limit, placement=placement) if c.fits]
        labels.update(c.label for c in candidates if c.label.startswith("list:"))
        for objective, measure in value.items():
            best = min(measure(c.timeline) for c in candidates)
            tied = {c.label for c in candidates if measure(c.timeline) <= best * (1 + 1e-6)}
            winners[objective].append(tied)
            wins[objective].update(tied)
            if len(tied) == 1:
                alone[objective].update(tied)
    for objective in value:
        print(f"objective {objective}: rules by problems won (alone)")
        for label in sorted(labels | set(wins[objective]), key=lambda name: -wins[objective][name]):
            print(f"  {label:45s} {wins[objective][label]:4d} ({alone[objective][label]})")
        uncovered = [tied for tied in winners[objective]]
        cover: list[str] = []
        while uncovered:
            pick = max(labels | set(wins[objective]), key=lambda name: sum(name in tied for tied in uncovered))
            cover.append(pick)
            uncovered = [tied for tied in uncovered if pick not in tied]
        print(f"  greedy cover ({len(cover)}): {', '.join(cover)}")


if __name__ == "__main__":
    main()

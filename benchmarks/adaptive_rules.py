"""Which of adaptive's list-scheduling rules ever win, on a seeded corpus of problems.

For every problem (random, uniform and dumbbell costs; one stage per rank, looped and V
placements; no limit, p and 2p microbatches per rank; eager messages) it simulates every
candidate ``adaptive_candidates`` builds and counts, per objective, the rules that are
the best (up to a relative 1e-6) and the ones that are the *only* best. A rule that
never wins alone and is always tied by another could be dropped; the greedy cover at
the end is the smallest set of rules found that keeps every problem's best::

    python benchmarks/adaptive_rules.py --problems 80
    python benchmarks/adaptive_rules.py --planner       # the planner's chunked layouts (minutes)
    python benchmarks/adaptive_rules.py --large         # P = 32, m = 128: every rule and the repair (minutes)
    python benchmarks/adaptive_rules.py --cover         # every rule on issue 23's corpus and this one (minutes)
    python benchmarks/adaptive_rules.py --repairs       # how many of the best orders to repair (minutes)

``--planner`` takes its problems from the planner instead: every preset's chunked
adaptive layouts (stage ``s`` on rank ``s mod pp``, ``v`` = 2–4, the smallest
micro-batch size, each rank's own memory budget and the planner's cap) for the default search of
``benchmarks/planner.py``, makespan only. For each rule it prints the problems it
wins, and for ``effort="fast"``'s rules (:data:`pipeplan.schedules.adaptive._FAST_RULES`)
how far their best is from the best of every rule.
"""

from __future__ import annotations

import argparse
import collections
import random
import time

from pipeplan import CommModel, StageCosts
from pipeplan.schedules.adaptive import _rules, adaptive_candidates, minimum_memory_limit
from pipeplan.schedules.list_scheduler import FORWARD_KEYS, KIND_ORDERS
from pipeplan.schedules.zb_v import zb_v_placement

PLANNER_PRESETS = {"driving-6cam": 32, "pi0": 8, "pi0.5": 8, "openvla-7b": 8, "gr00t-n1": 8, "cogact": 8,
                   "dumbbell": 8}  # GPUs, as benchmarks/planner.py searches them


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


def planner_problems(batch: int = 256):
    """``(name, stages, m, costs, comm, placement, limit)`` of every chunked adaptive layout the planner builds."""
    from pipeplan import presets
    from pipeplan.planner import DEFAULT_HEADROOM, Cluster, Workload
    from pipeplan.planner.evaluate import Evaluator
    from pipeplan.planner.layout import Layout
    from pipeplan.planner.space import SearchSpace

    for preset, gpus in PLANNER_PRESETS.items():
        cluster = Cluster.of("h100-80g", gpus)
        workload = Workload.from_spec(presets.get(preset), cluster.device)
        evaluator = Evaluator(workload, cluster, cluster.memory_bytes * (1 - DEFAULT_HEADROOM), "adam", "eager")
        space = SearchSpace(num_gpus=gpus, global_batch=batch, num_layers=workload.num_layers,
                            micro_batch_sizes=workload.micro_batch_sizes, max_virtual_stages=4)
        for config in space.configs():
            if not (config.chunked_adaptive and config.recompute == "none"):
                continue
            layout = evaluator.layouts.partitioned(config)
            if not isinstance(layout, Layout):
                continue
            comm = evaluator.links.comm(layout.boundary)
            costs, limit = evaluator.adaptive_inputs(config, layout, comm)  # the planner's limit, capped
            name = f"{preset} pp={config.pp} v={config.virtual_stages} b={config.micro_batch_size}"
            yield name, config.num_stages, config.num_microbatches, costs, comm, layout.placement, limit


def planner_corpus() -> None:
    from pipeplan.schedules.adaptive import _FAST_RULES

    fast = {f"list:{kind}/{key}/{'reserve' if reserve else 'free'}/{window}{'/defer' if defer else ''}"
            for kind, key, window, reserve, defer in _rules((0, 1, 0, 1), 4, 1.0, "fast")}
    wins: collections.Counter[str] = collections.Counter()
    gaps = []
    for name, stages, microbatches, costs, comm, placement, limit in planner_problems():
        candidates = [c for c in adaptive_candidates(stages, microbatches, costs=costs, comm=comm,
                                                     memory_limit=limit, placement=placement) if c.fits]
        best = min(c.timeline.makespan for c in candidates)
        tied = {c.label for c in candidates if c.timeline.makespan <= best * (1 + 1e-6)}
        wins.update(tied)
        mine = min(c.timeline.makespan for c in candidates if not c.label.startswith("list:") or c.label in fast)
        gaps.append(mine / best - 1)
        print(f"{name:32s} best {best:9.1f} by {sorted(tied)[0]:40s} fast rules {mine:9.1f} (+{100 * gaps[-1]:.2f} %)")
    print("rules by problems won:")
    for label, count in wins.most_common():
        print(f"  {label:45s} {count:4d}{'  (fast)' if label in fast else ''}")
    print(f"fast rules {sorted(_FAST_RULES)}: worst +{100 * max(gaps):.2f} %, mean +{100 * sum(gaps) / len(gaps):.2f} % "
          f"over {len(gaps)} layouts (before the repair)")


def large_corpus(cases: int = 6, seed: int = 3) -> None:
    """P = 32, m = 128, one stage per rank: which of every rule win, and what repairing the 3 best gains.

    Two uniform problems (the zero-bubble paper's 1.5B row) and random unequal ones
    (F in [5, 40], B in [0.8F, 1.2F], W in [0.3F, 0.7F]), limits p and 2p microbatches.
    Every rule is tried (:func:`every_rule`): this picked
    :data:`pipeplan.schedules.adaptive._LARGE_RULES` and the repair count at this size.
    """
    from pipeplan.schedules import adaptive as module
    from pipeplan.schedules.refine import refine

    ranks, microbatches, comm = 32, 128, CommModel(latency=0.5)
    saved = module._rules
    module._rules = lambda ranks, stages, limit, effort="full", actions=0: every_rule(ranks, stages, limit)
    rng = random.Random(seed)
    wins = {"makespan": collections.Counter(), "span": collections.Counter()}
    value = {"makespan": lambda t: t.makespan, "span": lambda t: float(t.spans.max())}
    try:
        for case in range(cases):
            if case < 2:
                forward, gradient, weight = [18.5] * ranks, [18.1] * ranks, [9.3] * ranks
            else:
                forward = [rng.uniform(5, 40) for _ in range(ranks)]
                gradient = [f * rng.uniform(0.8, 1.2) for f in forward]
                weight = [f * rng.uniform(0.3, 0.7) for f in forward]
            costs = StageCosts(forward, [g + w for g, w in zip(gradient, weight)], weight,
                               weight_stash_bytes=[0.37] * ranks)
            limit = float((1 + case % 2) * ranks)
            candidates = module.adaptive_candidates(ranks, microbatches, costs=costs, comm=comm, memory_limit=limit)
            for objective, measure in value.items():
                fitting = [c for c in candidates if c.fits]
                best = min(measure(c.timeline) for c in fitting)
                tied = sorted(c.label for c in fitting if measure(c.timeline) <= best * (1 + 1e-6))
                wins[objective].update(tied)
                gains = []
                for c in module._distinct_best(candidates, objective, 3):
                    _, timeline = refine(c.schedule, costs, comm, memory_limit=limit, objective=objective,
                                         max_evaluations=40, timeline=c.timeline)
                    gains.append(f"{c.label} {measure(c.timeline):.1f} -> {measure(timeline):.1f}")
                print(f"case {case} {objective}: best {best:.1f} by {tied[:3]}; repaired: {'; '.join(gains)}")
    finally:
        module._rules = saved
    for objective, counter in wins.items():
        print(f"{objective}: {counter.most_common()}")


def every_rule(ranks, num_stages, memory_limit):
    """Every kind order, forward key (one with one stage per rank), window and memory policy."""
    keys = ["microbatch"] if len(set(ranks)) == num_stages else list(FORWARD_KEYS)
    reserves = (True, False) if memory_limit is not None else (False,)
    return [(kind, key, window, reserve, False) for kind in KIND_ORDERS for key in keys
            for window in ("open", "count", "double", "cost", "zb", "fill") for reserve in reserves]


def cover_corpus() -> None:
    """Greedy covers of every rule's pre-repair bests: one stage per rank, and chunked.

    Problems: issue 23's corpus (``schedule_corpus.corpus``, 80) and this module's
    :func:`problems` (80); this picked ``_ONE_PER_RANK_RULES`` and ``_CHUNKED_EXTRA``.
    """
    from pipeplan.schedules import adaptive as module
    from schedule_corpus import COMM, STAGES, corpus

    saved = module._rules
    module._rules = lambda ranks, stages, limit, effort="full", actions=0: every_rule(ranks, stages, limit)
    try:
        issue = [(STAGES, m, costs, CommModel(latency=COMM), list(range(STAGES)), limit) for costs, m, limit in corpus(80)]
        groups: dict[bool, list[set[str]]] = {True: [], False: []}
        for stages, microbatches, costs, comm, placement, limit in [*issue, *problems(80)]:
            fitting = [c for c in module.adaptive_candidates(stages, microbatches, costs=costs, comm=comm,
                                                              memory_limit=limit, placement=placement) if c.fits]
            for measure in (lambda t: t.makespan, lambda t: float(t.spans.max())):
                best = min(measure(c.timeline) for c in fitting)
                tied = {c.label for c in fitting if measure(c.timeline) <= best * (1 + 1e-6)}
                if all(label.startswith("list:") for label in tied):  # a template holds it otherwise
                    groups[len(set(placement)) == stages].append(tied)
    finally:
        module._rules = saved
    for one, sets in groups.items():
        cover, left = [], sets
        while left:
            pick = max(set().union(*left), key=lambda label: (sum(label in tied for tied in left), -len(label)))
            cover.append(pick)
            left = [tied for tied in left if pick not in tied]
        print(f"{'one stage per rank' if one else 'chunked'}: {len(sets)} bests held by rules only; cover {cover}")


def repairs_corpus(count: int = 60) -> None:
    """adaptive with ``REPAIRS`` = 1, 2 and 4 on this module's problems, both objectives: what k buys."""
    import importlib

    from pipeplan import simulate

    module = importlib.import_module("pipeplan.schedules.adaptive")
    saved, results = module.REPAIRS, {}
    try:
        for k in (1, 2, 4):
            module.REPAIRS, values, started = k, [], time.process_time()
            for stages, microbatches, costs, comm, placement, limit in problems(count):
                for objective in ("makespan", "span"):
                    timeline = simulate(module.adaptive(stages, microbatches, costs=costs, comm=comm, memory_limit=limit,
                                                        placement=placement, objective=objective), costs, comm)
                    values.append(timeline.makespan if objective == "makespan" else float(timeline.spans.max()))
            results[k] = (values, time.process_time() - started)
    finally:
        module.REPAIRS = saved
    base, seconds = results[1]
    for k in (2, 4):
        values, spent = results[k]
        better = sum(v < b * (1 - 1e-9) for b, v in zip(base, values))
        worse = sum(v > b * (1 + 1e-9) for b, v in zip(base, values))
        gain = max((b - v) / b for b, v in zip(base, values))
        print(f"k = {k} against k = 1: better on {better}, worse on {worse} of {len(base)}, "
              f"largest gain {gain:.2%}, CPU {spent:.1f} s against {seconds:.1f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems", type=int, default=80)
    parser.add_argument("--planner", action="store_true", help="the planner's chunked adaptive layouts instead")
    parser.add_argument("--large", action="store_true", help="P = 32, m = 128 problems instead")
    parser.add_argument("--cover", action="store_true", help="covers of every rule on both corpora")
    parser.add_argument("--repairs", action="store_true", help="what repairing the 2 or 4 best orders buys")
    args = parser.parse_args()
    if args.repairs:
        repairs_corpus()
        return
    if args.cover:
        cover_corpus()
        return
    if args.planner:
        planner_corpus()
        return
    if args.large:
        large_corpus()
        return
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

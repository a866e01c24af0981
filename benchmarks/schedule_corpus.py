"""Issue 23's corpus: adaptive against the zero-bubble heuristic and torch's orders (part 5 of schedule_quality).

Seeded problems: P = 8 stages, one per rank; F uniform in [5, 40]; B (input gradient)
in [0.8F, 1.2F]; W in [0.3F, 0.7F]; T_comm 0.5 per message; m alternating 2P, 4P; the
limit P·M_B and 2P·M_B (M_B = 1 byte per stage, the W stash M_W/M_B = 32h/(34h + 5as) of
the paper's 1.5B row). Each peer's order is simulated by pipeplan with the same costs;
a heuristic order that exceeds the limit is not counted for it; torch's orders (which
take no limit) are compared at the corpus limit or, where they need more, at their own
peak, which adaptive then gets as its limit::

    python benchmarks/schedule_corpus.py --zb-checkout /tmp/zb --problems 80
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator

from _markers import signed
from _schedule_peers import TORCH_PEERS, heuristic_orders, load_heuristic, torch_schedule
from pipeplan import CommModel, StageCosts, analytic, simulate
from pipeplan.errors import DeadlockError
from pipeplan.schedules.adaptive import adaptive
from pipeplan.timeline import Timeline

__all__ = ["corpus", "corpus_tables"]

STAGES, COMM = 8, 0.5
STASH = 32 * 2304 / (34 * 2304 + 5 * 24 * 1024)  # M_W / M_B of the paper's 1.5B row
TIE = 1e-9


def corpus(count: int, seed: int = 0) -> Iterator[tuple[StageCosts, int, float]]:
    """``(costs, m, limit)`` of each seeded problem."""
    rng = random.Random(seed)
    for index in range(count):
        forward = [rng.uniform(5, 40) for _ in range(STAGES)]
        gradient = [f * rng.uniform(0.8, 1.2) for f in forward]
        weight = [f * rng.uniform(0.3, 0.7) for f in forward]
        m = (2 * STAGES, 4 * STAGES)[index % 2]
        limit = float((1, 2)[(index // 2) % 2] * STAGES)
        costs = StageCosts(forward, [g + w for g, w in zip(gradient, weight)], weight,
                           activation_bytes=[1.0] * STAGES, weight_stash_bytes=[STASH] * STAGES)
        yield costs, m, limit


def _span(timeline: Timeline) -> float:
    return float(timeline.spans.max())


def _fitting(schedules, costs: StageCosts, comm: CommModel, limit: float) -> list[Timeline]:
    out = []
    for schedule in schedules:
        try:
            timeline = simulate(schedule, costs, comm)
        except DeadlockError:
            continue
        if max(timeline.peak_bytes) <= limit * (1 + TIE):
            out.append(timeline)
    return out


def _summary(name: str, gaps: list[float], seconds: tuple[float, float | None]) -> str:
    wins = sum(g < -TIE for g in gaps)
    ties = sum(abs(g) <= TIE for g in gaps)
    losses = len(gaps) - wins - ties
    mean = sum(gaps) / len(gaps)
    return (f"| {name} | {len(gaps)} | {wins} / {ties} / {losses} | {signed(mean, '+.2%')} | {signed(max(gaps), '+.2%')} | "
            f"{seconds[0]:.3f} | {'—' if seconds[1] is None else f'{seconds[1]:.3f}'} |")


def corpus_tables(checkout: str | None, problems: int = 80, torch_problems: int = 80) -> list[str]:
    """Markdown lines: the heuristic table (or why it is skipped), the torch table, the bound."""
    comm = CommModel(latency=COMM)
    zb = load_heuristic(checkout)
    header = ["| peer, metric | problems | adaptive wins / ties / losses | mean gap | worst gap | "
              "adaptive CPU s per order | peer CPU s per order |", "|---|---|---|---|---|---|---|"]
    lines = [f"Issue 23's corpus ({problems} seeded problems, P = 8, see `benchmarks/schedule_corpus.py`); "
             "gap = adaptive / peer − 1 (negative: adaptive is faster):", "", *header]
    bound_gaps: dict[str, list[float]] = {"makespan": [], "span": []}
    if zb is None:
        lines.append("| zero-bubble heuristic | skipped: no checkout (pass --zb-checkout or set ZB_CHECKOUT) | | | | | |")
    else:
        gaps: dict[str, list[float]] = {"makespan": [], "span": []}
        own = peer = 0.0
        for costs, m, limit in corpus(problems):
            started = time.process_time()
            orders = heuristic_orders(zb, costs, comm_latency=COMM, num_microbatches=m, memory_limit=limit)
            peer += time.process_time() - started
            theirs = _fitting(orders, costs, comm, limit)
            for objective, value in (("makespan", lambda t: t.makespan), ("span", _span)):
                started = time.process_time()
                schedule = adaptive(STAGES, m, costs=costs, comm=comm, memory_limit=limit, objective=objective)
                own += time.process_time() - started
                mine = simulate(schedule, costs, comm)
                bounds = analytic.memory_lower_bounds(schedule, costs, comm, memory_limit=limit)
                bound_gaps[objective].append(value(mine) / getattr(bounds, objective) - 1)
                if theirs:
                    gaps[objective].append(value(mine) / min(value(t) for t in theirs) - 1)
        for objective in ("makespan", "span"):
            lines.append(_summary(f"zero-bubble heuristic (best of its 8 settings), {objective}", gaps[objective],
                                  (own / (2 * problems), peer / problems)))
    for name in TORCH_PEERS:
        gaps_t: list[float] = []
        own = 0.0
        for costs, m, limit in list(corpus(torch_problems)):
            schedule = torch_schedule(name, num_ranks=STAGES, num_microbatches=m)
            chunked = _chunk_costs(costs, schedule.placement)
            # at the corpus limit or, where torch's order needs more, at its own peak
            limit = max(limit, max(simulate(schedule, chunked, comm).peak_bytes))
            theirs = _fitting([schedule], chunked, comm, limit)
            started = time.process_time()
            mine = adaptive(2 * STAGES, m, costs=chunked, comm=comm, memory_limit=limit,
                            placement=schedule.placement)
            own += time.process_time() - started
            gaps_t.append(simulate(mine, chunked, comm).makespan / theirs[0].makespan - 1)
        lines.append(_summary(f"torch {name}, makespan", gaps_t, (own / len(gaps_t), None)))
    if bound_gaps["makespan"]:
        lines += ["", "Adaptive against `analytic.memory_lower_bounds` on the corpus: "
                  + "; ".join(f"{objective}: gap mean {sum(g) / len(g):.2%}, worst {max(g):.2%}, "
                              f"at the bound (proven optimal) on {sum(x <= 1e-6 for x in g)} of {len(g)}"
                              for objective, g in bound_gaps.items())]
    if zb is not None:
        lines += ["", *_long_uniform(zb)]
    return lines


def _long_uniform(zb) -> list[str]:
    """Uniform P = 32, m = 128 with the paper's 1.5B-row costs (m = 24 row), limits p and 2p: spans."""
    ranks, m, f, b, w, c = 32, 128, 18.522, 18.086, 9.337, 0.601
    costs = StageCosts([f] * ranks, [b + w] * ranks, [w] * ranks, activation_bytes=[1.0] * ranks,
                       weight_stash_bytes=[STASH] * ranks)
    comm = CommModel(latency=c)
    lines = ["| uniform P = 32, m = 128 (1.5B row costs) | limit | heuristic span | adaptive span | gap | "
             "adaptive CPU s | heuristic CPU s (8 settings) |", "|---|---|---|---|---|---|---|"]
    for k in (1, 2):
        limit = float(k * ranks)
        started = time.process_time()
        theirs = _fitting(heuristic_orders(zb, costs, comm_latency=c, num_microbatches=m, memory_limit=limit),
                          costs, comm, limit)
        peer = time.process_time() - started
        started = time.process_time()
        mine = simulate(adaptive(ranks, m, costs=costs, comm=comm, memory_limit=limit, objective="span"), costs, comm)
        own = time.process_time() - started
        best = min(_span(t) for t in theirs)
        lines.append(f"| | {k}p·M_B | {best:.2f} | {_span(mine):.2f} | {signed(_span(mine) / best - 1, '+.4%')} | "
                     f"{own:.2f} | {peer:.2f} |")
    return lines


def _chunk_costs(costs: StageCosts, placement) -> StageCosts:
    """Each rank's stage costs split evenly over its two chunks (stage ``s`` of rank ``r``: half of ``r``'s)."""
    from pipeplan.schedule import Kind

    stages = len(placement)
    half = [0.5] * stages
    forward = [costs.duration(Kind.F, placement[s], 0) / 2 for s in range(stages)]
    backward = [costs.duration(Kind.B, placement[s], 0) / 2 for s in range(stages)]
    weight = [costs.duration(Kind.W, placement[s], 0) / 2 for s in range(stages)]
    return StageCosts(forward, backward, weight, activation_bytes=half, weight_stash_bytes=[STASH / 2] * stages)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--zb-checkout", default=None)
    parser.add_argument("--problems", type=int, default=80)
    parser.add_argument("--torch-problems", type=int, default=80)
    args = parser.parse_args()
    print("\n".join(corpus_tables(args.zb_checkout, args.problems, args.torch_problems)))


if __name__ == "__main__":
    main()

"""The peers adaptive is measured against, as pipeplan ``Schedule`` objects (benchmark-only).

* The zero-bubble repository's automatic heuristic (sail-sg/zero-bubble-pipeline-parallelism,
  ``megatron/core/pipeline_parallel/zerobubble/scheduler/zb.py``: ``Graph.manual_order`` under
  the eight flag settings ``initial_solution`` tries), imported from a checkout you point at
  (``--zb-checkout`` or ``$ZB_CHECKOUT``). Its code is never copied into pipeplan: the
  module is loaded from that checkout by path (``pulp``, used only by its ILP pass, is
  stubbed). Without a checkout :func:`load_heuristic` returns ``None`` and the benchmark
  skips that part.
* torch 2.13's ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV`` and
  ``ScheduleInterleavedZeroBubble`` orders, built by each class's own
  ``_calculate_single_rank_operations`` (no process group, no stages: the object is
  created without ``__init__`` and given the fields those methods read).

    heuristic = load_heuristic("/tmp/zb")
    orders = heuristic_orders(heuristic, costs, comm_latency=0.5, num_microbatches=16, memory_limit=8.0)
    schedule = torch_schedule("ScheduleZBVZeroBubble", num_ranks=8, num_microbatches=16)
"""

from __future__ import annotations

import importlib.util
import itertools
import os
import sys
import types
from pathlib import Path
from typing import Any

from pipeplan import StageCosts
from pipeplan.schedule import Action, Kind, Schedule

__all__ = ["load_heuristic", "heuristic_orders", "torch_schedule", "TORCH_PEERS"]

_ZB_DIR = Path("megatron/core/pipeline_parallel/zerobubble/scheduler")
_PACKAGE = "megatron.core.pipeline_parallel.zerobubble.scheduler"


def load_heuristic(checkout: str | None) -> Any | None:
    """The heuristic's ``zb`` module from ``checkout`` (or ``$ZB_CHECKOUT``), ``None`` when absent."""
    checkout = checkout or os.environ.get("ZB_CHECKOUT")
    if not checkout or not (Path(checkout) / _ZB_DIR / "zb.py").is_file():
        return None
    if "pulp" not in sys.modules:  # only create_scheduled_nodes (not used here) calls pulp.value
        sys.modules["pulp"] = types.ModuleType("pulp")
    modules = {}
    for name in ("graph", "zb"):
        spec = importlib.util.spec_from_file_location(f"{_PACKAGE}.{name}", Path(checkout) / _ZB_DIR / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[f"{_PACKAGE}.{name}"] = module  # zb.py imports graph by its full name
        source = (Path(checkout) / _ZB_DIR / f"{name}.py").read_text()
        # zb.py ends manual_order with asserts on its own clock; with the window reaching m on
        # tight memory they fire on orders that still run (its clock, not the order, is off),
        # so they are compiled out and pipeplan's simulator judges every order instead.
        exec(compile(source, spec.origin or name, "exec", optimize=1), module.__dict__)
        modules[name] = module
    return modules["zb"]


def heuristic_orders(zb: Any, costs: StageCosts, *, comm_latency: float, num_microbatches: int,
                     memory_limit: float) -> list[Schedule]:
    """The heuristic's orders under each of ``initial_solution``'s eight flag settings.

    It sees what adaptive sees: per-stage ``F`` (forward), ``B`` (input gradient,
    pipeplan's ``I``), ``W`` times, one message time, per-stage memory (``+M_B`` at ``F``,
    ``M_W − M_B`` at ``B``, ``−M_W`` at ``W``) and the limit on every stage. Each stage's
    order is its actions sorted by the heuristic's completion times (``create_scheduled_nodes``).
    The caller simulates them and keeps the best that fits (``initial_solution`` keeps the
    smallest span by its own clock; taking the best of all eight by pipeplan's simulator
    can only help the heuristic). Settings that raise (``"Cannot fit memory"``) are skipped.
    """
    stages = costs.num_stages
    config = types.SimpleNamespace(
        cost_f=[costs.duration(Kind.F, s, 0) for s in range(stages)],
        cost_b=[costs.duration(Kind.I, s, 0) for s in range(stages)],
        cost_w=[costs.duration(Kind.W, s, 0) for s in range(stages)],
        mem_f=list(costs.activation_bytes),
        mem_b=[w - a for a, w in zip(costs.activation_bytes, costs.weight_stash_bytes)],
        mem_w=[-w for w in costs.weight_stash_bytes],
        max_mem=[memory_limit] * stages, cost_comm=comm_latency, print_scaling=1,
    )
    graph = zb.Graph.build_graph(stages, num_microbatches, config)
    kinds = (Kind.F, Kind.I, Kind.W)
    out = []
    for flags in itertools.product((True, False), repeat=3):  # initial_solution's loop
        try:
            _, completion, _ = graph.manual_order(*flags)
        except ValueError:  # "Cannot fit memory"
            continue
        orders = []
        for stage in range(stages):
            nodes = [(completion[graph.get_id(k, stage, mb)], k, mb) for k in range(3) for mb in range(num_microbatches)]
            orders.append([Action(kinds[k], stage, mb) for _, k, mb in sorted(nodes)])
        out.append(Schedule(orders, list(range(stages)), num_microbatches, name="zb-heuristic"))
    return out


TORCH_PEERS = ("ScheduleZBVZeroBubble", "ScheduleDualPipeV", "ScheduleInterleavedZeroBubble")


def torch_schedule(name: str, *, num_ranks: int, num_microbatches: int) -> Schedule:
    """torch's order for ``num_ranks`` ranks, two stages each (V for ZBV/DualPipeV, looped else).

    A full backward (DualPipeV's, inside its overlapped ``F``+``B`` pairs too) becomes ``I``
    then ``W`` at the same place: the gradient leaves after ``I``, which can only help torch.
    """
    from torch.distributed.pipelining import schedules as ts
    from torch.distributed.pipelining.schedules import _ComputationType as C

    cls = getattr(ts, name)
    peer = cls.__new__(cls)
    num_stages = 2 * num_ranks
    peer.pp_group_size, peer.n_local_stages = num_ranks, 2
    peer._n_microbatches, peer._num_stages, peer.num_stages = num_microbatches, num_stages, num_stages
    style = "loop" if name == "ScheduleInterleavedZeroBubble" else "v"
    peer.stage_index_to_group_rank = ts.generate_stage_to_rank_mapping(num_ranks, num_stages, style=style)
    peer.number_of_rounds = max(1, num_microbatches // num_ranks)
    peer.microbatches_per_round = num_microbatches // peer.number_of_rounds
    orders: list[list[Action]] = []
    for rank in range(num_ranks):
        peer.rank = rank
        order: list[Action] = []
        pending = list(peer._calculate_single_rank_operations(rank))
        while pending:
            action = pending.pop(0)
            if action is None:
                continue
            if action.computation_type == C.OVERLAP_F_B:
                pending[:0] = list(action.sub_actions)
                continue
            kind = {C.FORWARD: [Kind.F], C.BACKWARD_INPUT: [Kind.I], C.BACKWARD_WEIGHT: [Kind.W],
                    C.FULL_BACKWARD: [Kind.I, Kind.W]}[action.computation_type]
            order.extend(Action(k, action.stage_index, action.microbatch_index) for k in kind)
        orders.append(order)
    placement = [peer.stage_index_to_group_rank[s] for s in range(num_stages)]
    return Schedule(orders, placement, num_microbatches, name=name)

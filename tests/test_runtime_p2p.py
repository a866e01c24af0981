"""Message plans and headers (no processes): every cross-rank edge is one message, in sender order."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

import pipeplan  # noqa: E402
from pipeplan import Action, StageCosts  # noqa: E402
from pipeplan.runtime.p2p import MessagePlan, Packet, decode_header, encode_header, resize  # noqa: E402
from pipeplan.runtime.recorder import assemble_timeline  # noqa: E402

SHAPES = [
    ("gpipe", 3, {}),
    ("1f1b", 4, {}),
    ("interleaved", 4, {"virtual_stages": 2}),
    ("zb-h1", 3, {}),
    ("zb-h2", 3, {}),
    ("zb-v", 4, {}),
    ("adaptive", 3, {"costs": StageCosts(forward=[3, 1, 2])}),
]


def _schedules() -> list[Any]:
    return [
        pytest.param(name, stages, options, id=name) if name in pipeplan.SCHEDULES
        else pytest.param(name, stages, options, id=name, marks=pytest.mark.skip(reason=f"{name} not built"))
        for name, stages, options in SHAPES
    ]


def _check_plan(schedule: Any) -> None:
    plans = [MessagePlan(schedule, rank) for rank in range(schedule.num_ranks)]
    placement = schedule.placement
    for rank, plan in enumerate(plans):
        # the receiver's view of a link is exactly the sender's sequence
        for src, sequence in plan.incoming.items():
            assert sequence == plans[src].outgoing[rank]
        for dst, sequence in plan.outgoing.items():
            assert dst != rank
            # a header precedes every activation, just before it (its microbatch may have its own shape)
            for index, message in enumerate(sequence):
                if message.kind == "act":
                    assert sequence[index - 1] == Packet("hdr", message.stage, message.microbatch)
                if message.kind == "hdr":
                    assert sequence[index + 1] == Packet("act", message.stage, message.microbatch)
    # every cross-rank dependency is one message, produced and consumed by the right actions
    for rank, order in enumerate(schedule.orders):
        for action in order:
            for dependency in schedule.dependencies(action):
                src = placement[dependency.stage]
                if src == rank:
                    assert action not in plans[rank].needs or plans[rank].needs[action][0] != src
                    continue
                need_src, message = plans[rank].needs[action]
                assert need_src == src
                assert plans[src].produces[dependency] == (rank, message)
                assert message in plans[src].outgoing[rank]
    total_messages = sum(len([m for m in seq if m.kind != "hdr"]) for p in plans for seq in p.outgoing.values())
    assert total_messages == sum(len(p.needs) for p in plans)


@pytest.mark.parametrize("name, num_stages, options", _schedules())
def test_message_plans_match_on_both_ends(name: str, num_stages: int, options: dict[str, Any]) -> None:
    _check_plan(pipeplan.build_schedule(name, num_stages=num_stages, num_microbatches=5, **options))


@settings(max_examples=20, deadline=None)
@given(st.lists(st.floats(0.5, 5), min_size=2, max_size=4), st.integers(1, 6), st.booleans())
def test_message_plans_for_adaptive_orders(forward: list[float], microbatches: int, split: bool) -> None:
    schedule = pipeplan.build_schedule("adaptive", num_stages=len(forward), num_microbatches=microbatches,
                                       costs=StageCosts(forward=forward), backward="split" if split else "full")
    _check_plan(schedule)


def test_one_f_one_b_link_sequence() -> None:
    # 1F1B, 2 stages, 2 microbatches: rank 0 runs F0 F1 B0 B1, rank 1 runs F0 B0 F1 B1
    plan = MessagePlan(pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=2), 1)
    assert plan.incoming[0] == [Packet("hdr", 0, 0), Packet("act", 0, 0), Packet("hdr", 0, 1), Packet("act", 0, 1)]
    assert plan.outgoing[0] == [Packet("grad", 1, 0), Packet("grad", 1, 1)]
    assert plan.needs[Action("F", 1, 1)] == (0, Packet("act", 0, 1))


def test_header_round_trip_and_resize() -> None:
    tensors = [torch.zeros(9, 3, 4), torch.zeros(9, dtype=torch.int64), torch.zeros(5)]
    specs, is_tuple = decode_header(encode_header(tensors, "cpu", is_tuple=True), batch_size=9)
    assert is_tuple
    assert [s.shape for s in specs] == [(9, 3, 4), (9,), (5,)]
    assert [s.dtype for s in specs] == [torch.float32, torch.int64, torch.float32]
    assert [s.shape for s in resize(specs, 8)] == [(8, 3, 4), (8,), (5,)]


def test_header_rejects_too_many_dimensions() -> None:
    with pytest.raises(pipeplan.InvalidInputError, match="header"):
        encode_header([torch.zeros([1] * 8)] * 7, "cpu")


def test_assembled_timeline_aligns_ranks_on_one_host() -> None:
    schedule = pipeplan.build_schedule("gpipe", num_stages=2, num_microbatches=1)
    # rows: [starts, ends, origin (s), host checksum]; rank 1 left the barrier 2 ms after rank 0
    rows = [np.array([0.0, 3.0, 1.0, 4.0, 100.0, 7.0]), np.array([0.0, 0.5, 0.5, 1.0, 100.002, 7.0])]
    timeline = assemble_timeline(schedule, rows)
    assert timeline.source == "measured"
    np.testing.assert_allclose(timeline.start, [0.0, 3.0, 2.0, 2.5])
    np.testing.assert_allclose(timeline.end, [1.0, 4.0, 2.5, 3.0])
    # on different hosts the rows keep their own origins
    rows[1][-1] = 8.0
    np.testing.assert_allclose(assemble_timeline(schedule, rows).start, [0.0, 3.0, 0.0, 0.5])

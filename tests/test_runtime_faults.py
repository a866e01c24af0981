"""A rank that raises, dies or hangs stops the whole run, with a message, in bounded time."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import pipeplan  # noqa: E402
from pipeplan import RuntimeFailure  # noqa: E402
from pipeplan.runtime import PipelineRuntime, spawn  # noqa: E402
from pipeplan.runtime.faults import decode_tracker, format_failure  # noqa: E402


class Faulty(nn.Module):
    """A linear stage that misbehaves on its ``fail_at``-th forward call."""

    def __init__(self, mode: str, fail_at: int) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.mode = mode
        self.fail_at = fail_at
        self.calls = 0

    def forward(self, x: Any) -> Any:
        if self.calls == self.fail_at:
            if self.mode == "raise":
                raise ValueError("boom")
            if self.mode == "die":
                os._exit(7)
            if self.mode == "hang":
                time.sleep(600)
        self.calls += 1
        return self.linear(x)


def _worker(rank: int, world_size: int, mode: str) -> float:
    torch.manual_seed(0)
    stages = [nn.Linear(4, 4) for _ in range(world_size)]
    stages[1] = Faulty(mode, fail_at=2)
    schedule = pipeplan.build_schedule("1f1b", num_stages=world_size, num_microbatches=4)
    runtime = PipelineRuntime(stages, schedule, lambda out, target: ((out - target) ** 2).mean())
    return runtime.step(torch.randn(8, 4), torch.randn(8, 4)).loss


@pytest.mark.timeout(60)
def test_a_rank_that_raises_stops_every_rank_with_its_message() -> None:
    began = time.monotonic()
    with pytest.raises(RuntimeFailure) as info:
        spawn(_worker, 3, "raise", timeout=20)
    elapsed = time.monotonic() - began
    message = str(info.value)
    assert message.startswith("rank 1 failed in F(stage 1, mb 2): ValueError: boom"), message
    assert "stopped: rank 0 in " in message and ", rank 2 in " in message
    assert elapsed < 20, elapsed  # the watchdogs stop ranks 0 and 2 (in ~0.1 s) long before the timeout


@pytest.mark.timeout(60)
def test_a_rank_that_dies_is_named_with_its_action() -> None:
    began = time.monotonic()
    with pytest.raises(RuntimeFailure) as info:
        spawn(_worker, 2, "die", timeout=10)
    message = str(info.value)
    assert message.startswith("rank 1 died with exit status 7 in F(stage 1, mb 2)"), message
    assert time.monotonic() - began < 15


@pytest.mark.timeout(60)
def test_a_hung_rank_is_bounded_by_the_timeout() -> None:
    began = time.monotonic()
    with pytest.raises(RuntimeFailure) as info:
        spawn(_worker, 2, "hang", timeout=3)
    elapsed = time.monotonic() - began
    # rank 0 waits for rank 1's activation until gloo's 3 s timeout, then the
    # launcher gives rank 1 another 3 s and terminates it
    message = str(info.value)
    assert "rank 0 failed in B(stage 0, mb 2)" in message, message
    assert "act(stage 1, mb 2) from rank 1 failed" not in message  # rank 0 waits for a gradient
    assert "grad(stage 1, mb 2) from rank 1 failed" in message
    assert "stopped: rank 1 in F(stage 1, mb 2)" in message
    assert elapsed < 3 + 3 + 8, elapsed


def test_failure_messages_name_rank_and_action() -> None:
    assert format_failure(2, "B(stage 3, mb 1)", ValueError("bad\nsecond line")) == (
        "rank 2 failed in B(stage 3, mb 1): ValueError: bad"
    )
    assert decode_tracker([3, 1, 4]) == "W(stage 1, mb 4)"
    assert decode_tracker([0, 0, 0]) == "setup"

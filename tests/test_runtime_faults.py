"""A rank that raises, dies or hangs stops the whole run in bounded time, and the report blames it.

The process tests use :mod:`_fault_models`'s faulty layer in a real 1F1B step
(2 processes; one pp = 2 × dp = 2 case); the rest checks :func:`explain`'s
rules on hand-made rank states, without processes.
"""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from _processes import live_children

torch = pytest.importorskip("torch")
nn = torch.nn

import pipeplan  # noqa: E402
from _fault_models import Faulty  # noqa: E402
from pipeplan import InvalidInputError, RuntimeFailure  # noqa: E402
from pipeplan.runtime import PipelineRuntime, ProcessGrid, RunInterrupted, spawn  # noqa: E402
from pipeplan.runtime.faults import (  # noqa: E402
    FINISHED,
    NOT_WAITING,
    RUNNING,
    STOPPED,
    WAITING_ON_GROUP,
    RankOutcome,
    RankState,
    describe_exit,
    explain,
    format_failure,
    is_communication_error,
)


def _worker(rank: int, world_size: int, mode: str, bad_rank: int, dp: int) -> float:
    torch.manual_seed(0)
    grid = ProcessGrid.create(pp=world_size // dp, dp=dp)
    stages: list[Any] = [nn.Linear(4, 4) for _ in range(grid.pp)]
    if rank == bad_rank:
        stages[grid.pp_rank] = Faulty(mode, fail_at=2)  # its 3rd forward: microbatch 2 of the first step
    schedule = pipeplan.build_schedule("1f1b", num_stages=grid.pp, num_microbatches=4)
    runtime = PipelineRuntime(stages, schedule, lambda out, target: ((out - target) ** 2).mean(),
                              pp_group=grid.pp_group, dp_group=grid.dp_group)
    return runtime.step(torch.randn(8, 4), torch.randn(8, 4)).loss


#: A run timeout longer than any of these tests may take (their ``pytest.mark.timeout``): a run that ends
#: within the test's own limit was ended by the failure, not by its timeout. No wall-clock bound of the
#: test's own, which a loaded machine could break.
LONGER_THAN_THE_TEST_S = 600.0


def _failure(mode: str, bad_rank: int, *, world_size: int = 2, dp: int = 1,
             timeout: float = LONGER_THAN_THE_TEST_S) -> str:
    with pytest.raises(RuntimeFailure) as info:
        spawn(_worker, world_size, mode, bad_rank, dp, timeout=timeout)
    return str(info.value)


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode, bad_rank, headline", [
    ("raise", 1, "rank 1 failed in F(stage 1, mb 2): ValueError: boom"),
    ("sys_exit", 1, "rank 1 died with exit status 1 in F(stage 1, mb 2)"),
    ("os_exit", 1, "rank 1 died with exit status 1 in F(stage 1, mb 2)"),
    ("os_exit", 0, "rank 0 died with exit status 1 in F(stage 0, mb 2)"),
    ("exit75", 1, "rank 1 died with exit status 75 in F(stage 1, mb 2)"),
    ("kill9", 1, "rank 1 died with signal SIGKILL in F(stage 1, mb 2)"),
])
def test_the_rank_that_raised_or_died_is_named_first(mode: str, bad_rank: int, headline: str) -> None:
    message = _failure(mode, bad_rank)  # ends within this test's 60 s: the peer fails at once, not at the timeout
    assert message.startswith(headline), message
    assert "\n" not in message
    # the healthy peer comes after, as a consequence, never as the headline
    healthy = 1 - bad_rank
    assert not message.startswith(f"rank {healthy}")


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad_rank", [0, 1])
def test_a_hung_rank_is_blamed_not_the_peer_that_timed_out(bad_rank: int) -> None:
    # ends within this test's 60 s: the 3 s timeout, the launcher's grace to stop, start-up (no bound of its own)
    message = _failure("hang", bad_rank, timeout=3)
    assert message.startswith(f"rank {bad_rank} hung in F(stage {bad_rank}, mb 2): no progress for "), message
    assert "(timeout 3 s)" in message


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_hung_rank_is_blamed_in_a_pp_by_dp_grid() -> None:
    # global rank 3 holds stage 1 of replica 1; rank 2 waits for it, ranks 0 and 1
    # wait in the data-parallel all-reduce (or are stopped earlier)
    message = _failure("hang", 3, world_size=4, dp=2, timeout=3)
    assert message.startswith("rank 3 hung in F(stage 1, mb 2): no progress for "), message


_children = live_children


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="counts processes through /proc")
def test_sigint_ends_every_rank_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    marker = tmp_path / "stuck"
    monkeypatch.setenv("PIPEPLAN_TEST_MARKER", str(marker))
    before = _children()

    def interrupt_when_stuck() -> None:
        deadline = time.monotonic() + 30
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=interrupt_when_stuck, daemon=True).start()
    with pytest.raises(RunInterrupted) as info:  # ended at once: within this test's 60 s, not at the run's timeout
        spawn(_worker, 2, "hang", 1, 1, timeout=LONGER_THAN_THE_TEST_S)
    assert info.value.signum == signal.SIGINT
    # rank 1 hangs in its action; rank 0 is wherever it got to (waiting for rank 1 sooner or later)
    assert re.fullmatch(r"interrupted by SIGINT; ended rank 0 in .+, rank 1 in F\(stage 1, mb 2\)",
                        str(info.value)), str(info.value)
    assert _children() - before == set()


def test_spawn_refuses_a_timeout_below_one_second() -> None:
    with pytest.raises(InvalidInputError, match=r"timeout must be at least 1 second\(s\), got 1e-09"):
        spawn(_worker, 2, "raise", 1, 1, timeout=1e-9)


# ------------------------------------------------------------- the rules
def _state(where: str, *, in_action: bool = True, waiting_on: int = NOT_WAITING, since: float = 0.0,
           outcome: int = RUNNING, ended: float = 0.0) -> RankState:
    state = RankState()
    state.where, state.in_action, state.waiting_on = where.encode(), int(in_action), waiting_on
    state.since, state.outcome, state.ended = since, outcome, ended
    return state


def test_a_dead_rank_outranks_the_errors_of_its_peers() -> None:
    outcomes = [
        RankOutcome(0, _state("B(stage 0, mb 2)", waiting_on=1), exit_code=1,
                    error="rank 0 failed in B(stage 0, mb 2): RuntimeError: Connection reset by peer", comm_peer=1),
        RankOutcome(1, _state("F(stage 1, mb 2)"), exit_code=1, seen_dead_at=5.0),
    ]
    message = explain(outcomes, timeout=10)
    assert message == ("rank 1 died with exit status 1 in F(stage 1, mb 2); then rank 0 failed in "
                       "B(stage 0, mb 2): RuntimeError: Connection reset by peer")


def test_a_rank_the_launcher_ended_is_not_dead() -> None:
    outcomes = [
        RankOutcome(0, _state("F(stage 0, mb 1)"), error="rank 0 failed in F(stage 0, mb 1): ValueError: x"),
        RankOutcome(1, _state("F(stage 1, mb 0)", waiting_on=0), exit_code=-15, ended_by_launcher=True),
    ]
    assert explain(outcomes, timeout=10) == (
        "rank 0 failed in F(stage 0, mb 1): ValueError: x (stopped: rank 1 in F(stage 1, mb 0), waiting for rank 0)"
    )


def test_the_wait_for_chain_leads_to_the_hung_rank() -> None:
    # 0 timed out waiting for 1, 1 waits for 2, 2 computes since t=1 (stopped at t=13), 3 waits for 2
    outcomes = [
        RankOutcome(0, _state("B(stage 0, mb 0)", waiting_on=1), exit_code=1, comm_peer=1,
                    error="rank 0 failed in B(stage 0, mb 0): RuntimeError: receiving ... Timed out"),
        RankOutcome(1, _state("F(stage 1, mb 3)", waiting_on=2, since=0.5, outcome=STOPPED), exit_code=75),
        RankOutcome(2, _state("F(stage 2, mb 2)", since=1.0, outcome=STOPPED, ended=13.0), exit_code=75),
        RankOutcome(3, _state("F(stage 3, mb 2)", waiting_on=2, since=0.2, outcome=STOPPED), exit_code=75),
    ]
    message = explain(outcomes, timeout=10, now=20.0)
    assert message.startswith("rank 2 hung in F(stage 2, mb 2): no progress for 12.0 s (timeout 10 s); "
                              "then rank 0 failed in B(stage 0, mb 0)"), message
    assert "(stopped: rank 1 in F(stage 1, mb 3), waiting for rank 2, rank 3 in F(stage 3, mb 2), " \
           "waiting for rank 2)" in message


def test_a_collective_timeout_blames_the_rank_stuck_longest_in_an_action() -> None:
    outcomes = [
        RankOutcome(0, _state("the data-parallel all-reduce", in_action=False, waiting_on=WAITING_ON_GROUP),
                    exit_code=1, comm_peer=WAITING_ON_GROUP, error="rank 0 failed in the data-parallel all-reduce"),
        RankOutcome(1, _state("W(stage 1, mb 3)", since=4.0), exit_code=-15, ended_by_launcher=True),
        RankOutcome(2, _state("F(stage 0, mb 0)", since=2.0), exit_code=-15, ended_by_launcher=True),
    ]
    assert explain(outcomes, timeout=5, now=9.0).startswith("rank 2 hung in F(stage 0, mb 0): no progress for 7.0 s")


def test_a_finished_rank_is_not_listed() -> None:
    outcomes = [
        RankOutcome(0, _state("between actions", in_action=False, outcome=FINISHED), exit_code=0),
        RankOutcome(1, _state("setup", in_action=False), exit_code=-9, seen_dead_at=1.0),
    ]
    assert explain(outcomes, timeout=5) == "rank 1 died with signal SIGKILL in setup"


def test_failure_messages_drop_cpp_locations_and_gloo_advice() -> None:
    assert format_failure(2, "B(stage 3, mb 1)", ValueError("bad\nsecond line")) == (
        "rank 2 failed in B(stage 3, mb 1): ValueError: bad"
    )
    gloo = RuntimeError("receiving grad(stage 1, mb 2) from rank 1 failed: [/pytorch/third_party/gloo/gloo/"
                        "transport/tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:5355. This is typically "
                        "caused by a remote worker crashing. Check the logs. GLHF!")
    assert format_failure(0, "B(stage 0, mb 2)", gloo) == (
        "rank 0 failed in B(stage 0, mb 2): RuntimeError: receiving grad(stage 1, mb 2) from rank 1 failed: "
        "Connection closed by peer [127.0.0.1]:5355"
    )
    assert is_communication_error(gloo) and not is_communication_error(ValueError("Connection closed by peer"))
    assert describe_exit(75) == "exit status 75" and describe_exit(-9) == "signal SIGKILL"

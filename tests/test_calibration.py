"""Machine calibration: the link fit and the core-sharing table."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeplan.calibration import Calibration, fit_link
from pipeplan.errors import InvalidInputError


@given(latency=st.floats(0.0, 10.0), bandwidth=st.floats(1e2, 1e9),
       sizes=st.lists(st.floats(0.0, 1e8), min_size=2, max_size=6, unique=True))
def test_fit_link_recovers_an_exact_line(latency, bandwidth, sizes):
    if max(sizes) - min(sizes) < 1e3:
        return  # sizes too close for the slope to carry information
    samples = [(size, latency + size / bandwidth) for size in sizes]
    fitted_latency, fitted_bandwidth = fit_link(samples)
    assert fitted_latency == pytest.approx(latency, abs=1e-6 + 1e-6 * max(sizes) / bandwidth)
    assert 1.0 / fitted_bandwidth == pytest.approx(1.0 / bandwidth, rel=1e-6)


def test_fit_link_without_size_dependence():
    assert fit_link([(4.0, 0.2), (4.0, 0.4)]) == (pytest.approx(0.3), math.inf)
    assert fit_link([(4.0, 0.3), (1e6, 0.2)])[1] == math.inf  # bigger was not slower
    with pytest.raises(InvalidInputError, match="at least one"):
        fit_link([])
    with pytest.raises(InvalidInputError, match="finite and >= 0"):
        fit_link([(4.0, -1.0)])


def test_calibration_round_trips_and_makes_a_comm_model():
    calibration = Calibration(latency=0.1, bandwidth=math.inf, slowdown=(1.0, 1.5), samples=((4.0, 0.1),))
    assert Calibration.from_dict(calibration.to_dict()) == calibration
    assert calibration.to_dict()["bandwidth"] is None
    comm = calibration.comm_model([100.0, 200.0])
    assert comm.boundary_times(3) == (0.1, 0.1)
    assert calibration.slowdown_for(1) == 1.0
    assert calibration.slowdown_for(2) == 1.5
    assert calibration.slowdown_for(8) == 1.5  # beyond the table: the last measured factor


@pytest.mark.parametrize(
    "payload,match",
    [
        ({"latency": 0, "bandwidth": None}, "calibration lacks slowdown"),
        ({"latency": 0, "bandwidth": None, "slowdown": [2.0]}, r"slowdown\[0\] must be 1"),
        ({"latency": -1, "bandwidth": None, "slowdown": [1.0]}, "latency must be a finite number >= 0"),
        ({"latency": 0, "bandwidth": 0, "slowdown": [1.0]}, "bandwidth must be a number > 0"),
        ({"latency": 0, "bandwidth": None, "slowdown": [1.0], "extra": 1}, "unknown keys"),
        ({"latency": 0, "bandwidth": None, "slowdown": [1.0], "samples": [[1, 2, 3]]}, r"samples\[0\]"),
    ],
)
def test_bad_calibrations_name_the_field(payload, match):
    with pytest.raises(InvalidInputError, match=match):
        Calibration.from_dict(payload)


@given(cores=st.integers(1, 4), world=st.integers(1, 6), alone=st.floats(1.0, 100.0),
       favour=st.floats(0.5, 1.0), rounds=st.integers(1, 5))
def test_core_sharing_charges_the_last_busy_rank(cores, world, alone, favour, rounds):
    """k equal jobs on c cores all finish by max(1, k/c) × alone, however unfairly the OS shares them."""
    from pipeplan.runtime.calibrate import slowdown_from_rounds

    def measured(rank: int, busy: int) -> float:
        if rank >= busy:
            return 0.0  # idle in a barrier
        last = alone * max(1.0, busy / cores)
        # The OS may finish rank 0 early (never before its work alone); the last rank ends the round.
        return max(alone, last * favour) if rank == 0 and busy > 1 else last

    times = [[[measured(rank, busy) for _ in range(rounds)] for busy in range(1, world + 1)]
             for rank in range(world)]
    slowdown = slowdown_from_rounds(times)
    assert slowdown[0] == 1.0
    for busy in range(1, world + 1):
        assert slowdown[busy - 1] == pytest.approx(max(1.0, busy / cores))
        assert slowdown[busy - 1] >= times[0][busy - 1][0] / alone - 1e-12  # never below rank 0's own view


def _timed_messages(rank: int, world_size: int) -> list[tuple[float, float]]:
    import time

    from pipeplan.runtime.calibrate import busy_sender_delays

    return busy_sender_delays([4.0, 40_000.0], lambda: time.sleep(0.01), repeats=3, warmup=1)


@pytest.mark.slow
def test_busy_sender_delays_are_timed_on_real_ranks_and_shared():
    """Two gloo ranks: one sample per size, the same on both, each a positive delay below the sender's work."""
    pytest.importorskip("torch")
    from pipeplan.runtime import spawn

    first, second = spawn(_timed_messages, 2, timeout=60)
    assert first == second
    assert [size for size, _ms in first] == [4.0, 40_000.0]
    for _size, delay in first:
        # Positive (it left after the stamp) and finite: loopback delivers within a second.
        assert 0.0 < delay < 1000.0

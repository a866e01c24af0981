"""The dual-rate runtime on real processes (gloo): exactness at k = 1, stale gradients, damping.

One :func:`run_dual_rate_configs` launch (a module fixture) runs every configuration
in the same two processes; the tests then check:

* k = 1, no overlap, λ = 1: the dual-rate run's weights after every step equal the
  synchronous pipeline's (PipelineRuntime, one microbatch), bit for bit;
* k = 2, staleness 1, λ = 0.5: the final weights equal a single-process replay of
  the dual-rate algorithm (:func:`replay_dual_rate`: stashed weights, λ^Δt on the
  vision gradient; also without stashing and with the encoder frozen), and the
  measured Δt per frame is what the schedule says;
* without weight stashing the stale backward runs on the current weights, so it
  differs from the stashed run once Δt > 0;
* the frozen encoder does not move;
* a rank that raises or hangs is named, with its action, by the runtime's launcher.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

torch = pytest.importorskip("torch")

from pipeplan import InvalidInputError  # noqa: E402
from pipeplan.errors import RuntimeFailure  # noqa: E402
from pipeplan.dualrate.policy import build_dual_rate_policy  # noqa: E402
from pipeplan.dualrate.runtime import (  # noqa: E402
    DualRateConfig, replay_dual_rate, run_dual_rate, run_dual_rate_configs)
from pipeplan.dualrate.worker import DualRateRank  # noqa: E402

pytestmark = pytest.mark.slow

SMALL = DualRateConfig(num_envs=8, image_size=12, channels=4, eval_samples=16, return_weights=True, lr=0.1)
EXACT = replace(SMALL, rate_ratio=1, max_staleness=0, damping=1.0, max_frames=4)
STALE = replace(SMALL, rate_ratio=2, max_staleness=1, damping=0.5, max_frames=5)


@pytest.fixture(scope="module")
def runs():
    configs = {
        "sync": replace(EXACT, method="synchronous", sync_microbatches=1),
        "exact": EXACT,
        "exact_recompute": replace(EXACT, stash_weights=False),
        "stale": STALE,
        "stale_recompute": replace(STALE, stash_weights=False),
        "frozen": replace(STALE, train_vision=False),
    }
    results = run_dual_rate_configs(list(configs.values()), timeout=120.0)
    return dict(zip(configs, results))


def _max_difference(first: dict, second: dict) -> float:
    assert first.keys() == second.keys()
    return max(float((first[name] - second[name]).abs().max()) for name in first)


def test_k1_no_overlap_equals_the_synchronous_pipeline(runs):
    sync, exact = runs["sync"], runs["exact"]
    assert exact.steps == sync.steps == 4
    assert [loss for _t, _n, loss in exact.curve] == [loss for _t, _n, loss in sync.curve]
    assert _max_difference(exact.weights, sync.weights) == 0.0
    assert _max_difference(runs["exact_recompute"].weights, sync.weights) == 0.0
    assert exact.staleness == {0: [0, 0, 0, 0]}


def test_stale_run_equals_the_single_process_replay(runs):
    stale = runs["stale"]
    assert stale.steps == 10 and stale.frames == 5
    assert stale.staleness == {0: [0, 1, 1, 1, 1]}
    assert _max_difference(stale.weights, replay_dual_rate(STALE)) < 1e-6
    # and the damping is there: the replay without it differs
    assert _max_difference(stale.weights, replay_dual_rate(replace(STALE, damping=1.0))) > 1e-4
    assert _max_difference(runs["stale_recompute"].weights, replay_dual_rate(replace(STALE, stash_weights=False))) < 1e-6
    assert _max_difference(runs["frozen"].weights, replay_dual_rate(replace(STALE, train_vision=False))) < 1e-6


def test_without_stashing_the_stale_gradient_uses_current_weights(runs):
    stashed, recomputed = runs["stale"].weights, runs["stale_recompute"].weights
    heads = [name for name in stashed if name.startswith("head.")]
    encoders = [name for name in stashed if name.startswith("encoder.")]
    assert max(float((stashed[n] - recomputed[n]).abs().max()) for n in encoders) > 1e-6
    assert heads  # the head trains in both


def test_frozen_encoder_keeps_its_initial_weights(runs):
    encoder, _head = build_dual_rate_policy(image_size=STALE.image_size, channels=STALE.channels, seed=STALE.seed)
    frozen = runs["frozen"].weights
    for name, param in encoder.named_parameters():
        assert torch.equal(frozen[f"encoder.{name}"], param.detach())
    assert runs["frozen"].frames_per_s > 0


def test_time_budget_stops_every_rank_at_the_same_frame():
    run = run_dual_rate_configs([replace(SMALL, max_frames=10_000, time_budget=0.5, return_weights=False)],
                                timeout=60.0)[0]
    assert 0 < run.frames < 10_000
    assert run.steps == run.frames * SMALL.rate_ratio
    # the budget ends the run at the first frame vision rank 0 began after it: counted on the run's own
    # action records (ms since the start barrier), not against the wall clock, which load stretches
    starts = [start for _rank, kind, stage, _frame, start, _end, _cpu in sorted(run.records, key=lambda r: r[3])
              if kind == "F" and stage == 0]
    assert len(starts) == run.frames
    assert max(starts[:-1]) < 500.0 <= starts[-1]


def _fault_at(handler_name, index, fault):
    """``DualRateRank``'s handler with ``fault()`` first at ``index`` (the ranks are forked: they inherit it)."""
    handler = getattr(DualRateRank, handler_name)

    def patched(self, state, at, position):
        if at == index:
            fault()
        handler(self, state, at, position)

    return patched


def test_a_rank_that_raises_is_named_with_its_action(monkeypatch):
    def boom():
        raise ValueError("boom")

    monkeypatch.setattr(DualRateRank, "_action_update", _fault_at("_action_update", 2, boom))
    with pytest.raises(RuntimeFailure, match=r"^rank 1 failed in U\(stage 1, mb 2\): ValueError: boom"):
        run_dual_rate(replace(SMALL, max_frames=4), timeout=30.0)


@pytest.mark.timeout(60)
def test_a_hung_rank_is_named_within_the_timeout(monkeypatch):
    # the rank hangs longer than this test may take: the run ends by its 3 s timeout or the test fails
    # (no wall-clock bound of the test's own, which a loaded machine could break)
    monkeypatch.setattr(DualRateRank, "_vision_update", _fault_at("_vision_update", 1, lambda: time.sleep(600)))
    with pytest.raises(RuntimeFailure, match=r"^rank 0 hung in U\(stage 0, mb 1\): no progress for .* \(timeout 3 s\)"):
        run_dual_rate(replace(SMALL, max_frames=4), timeout=3.0)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"rate_ratio": 0}, "rate_ratio must be >= 1"),
        ({"rate_ratio": 2.5}, "rate_ratio must be an integer"),
        ({"damping": 0.0}, "damping must be in (0, 1]"),
        ({"damping": 1.5}, "damping must be in (0, 1]"),
        ({"num_vision_stages": 4}, "more than the 3 vision layers"),
        ({"max_staleness": 2, "buffer_frames": 2}, "buffer_frames = 2 cannot hold max_staleness = 2"),
    ],
)
def test_bad_configuration_is_one_clear_error(options, message):
    with pytest.raises(InvalidInputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        DualRateConfig(**options)

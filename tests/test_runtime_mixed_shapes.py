"""Pipeline microbatches of different shapes (1 to 4 cameras, 1 to 4 samples) get exact gradients.

Real processes (CPU, gloo, 2 ranks). A tiny camera model: stage 0 turns each camera
image into tokens, so the activation between stages is ``(samples, 2 × cameras,
width)`` and differs per microbatch; the last stage pools the tokens with a
positional table of :data:`MAX_TOKENS` rows. Three steps accumulate: two of
different shapes (every activation after its own header) and a third with the
first's shapes (the headers are then known and none is sent). The reference is
the same modules on one process: ``sum_i loss_fn(model(x_i), y_i) * n_i / N`` per
step, backward. A microbatch the last stage cannot take (too many tokens) stops
both ranks with one line naming the rank, the stage and the microbatch.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import pytest

from _processes import live_children

torch = pytest.importorskip("torch")
nn = torch.nn

import pipeplan  # noqa: E402
from pipeplan import InvalidInputError, RuntimeFailure  # noqa: E402
from pipeplan.runtime import PipelineRuntime, spawn  # noqa: E402

PIXELS = 12
TOKENS_PER_CAMERA = 2
MAX_TOKENS = 8  # 4 cameras
WIDTH = 8
ACTIONS = 3
MICROBATCHES = 4
TOLERANCE = 1e-5
# (cameras, samples) per microbatch, per step: the third step repeats the first's shapes
STEPS = [
    [(1, 3), (4, 2), (2, 4), (3, 1)],
    [(2, 2), (2, 3), (4, 2), (1, 3)],
    [(1, 3), (4, 2), (2, 4), (3, 1)],
]


class CameraEncoder(nn.Module):
    """Stage 0: ``(samples, cameras, PIXELS)`` -> ``(samples, cameras × 2, WIDTH)`` tokens (and their camera ids)."""

    def __init__(self, with_ids: bool) -> None:
        super().__init__()
        self.patch = nn.Linear(PIXELS, TOKENS_PER_CAMERA * WIDTH)
        self.with_ids = with_ids

    def forward(self, images: Any) -> Any:
        samples, cameras, _ = images.shape
        tokens = torch.tanh(self.patch(images)).reshape(samples, cameras * TOKENS_PER_CAMERA, WIDTH)
        if not self.with_ids:
            return tokens
        ids = torch.arange(cameras).repeat_interleave(TOKENS_PER_CAMERA).expand(samples, -1).contiguous()
        return tokens, ids


class Block(nn.Module):
    """A middle stage: a residual mix over the tokens (passes camera ids through)."""

    def __init__(self) -> None:
        super().__init__()
        self.mix = nn.Linear(WIDTH, WIDTH)

    def forward(self, value: Any) -> Any:
        tokens = value[0] if isinstance(value, tuple) else value
        tokens = tokens + torch.tanh(self.mix(tokens))
        return (tokens, value[1]) if isinstance(value, tuple) else tokens


class Head(nn.Module):
    """The last stage: positions (at most MAX_TOKENS), attention pooling, actions."""

    def __init__(self, with_ids: bool) -> None:
        super().__init__()
        self.position = nn.Parameter(0.1 * torch.randn(MAX_TOKENS, WIDTH))
        self.camera = nn.Embedding(4, WIDTH) if with_ids else None
        self.mix = nn.Linear(WIDTH, WIDTH)
        self.score = nn.Linear(WIDTH, 1)
        self.out = nn.Linear(WIDTH, ACTIONS)

    def forward(self, value: Any) -> Any:
        tokens = value[0] if isinstance(value, tuple) else value
        length = tokens.shape[1]
        if length > MAX_TOKENS:
            raise ValueError(f"a sequence of {length} tokens, more than the head's {MAX_TOKENS} positions")
        x = tokens + self.position[:length]
        if self.camera is not None:
            x = x + self.camera(value[1])
        x = x + torch.tanh(self.mix(x))
        weights = torch.softmax(self.score(x), dim=1)
        return self.out((weights * x).sum(1))


def make_stages(num_stages: int, with_ids: bool) -> list[nn.Module]:
    """The same seeded stages on every process and in the reference."""
    torch.manual_seed(0)
    return [CameraEncoder(with_ids)] + [Block() for _ in range(num_stages - 2)] + [Head(with_ids)]


def loss_fn(output: Any, target: Any) -> Any:
    return ((output - target) ** 2).mean()


def make_microbatches(step: int, shapes: list[tuple[int, int]]) -> tuple[list[Any], list[Any]]:
    generator = torch.Generator().manual_seed(100 + step)
    inputs = [torch.randn(samples, cameras, PIXELS, generator=generator) for cameras, samples in shapes]
    targets = [torch.randn(samples, ACTIONS, generator=generator) for _cameras, samples in shapes]
    return inputs, targets


CONFIGS = [
    ("1f1b", 2, {}, False, False),
    ("zb-h1", 2, {}, False, False),
    ("zb-h1", 2, {}, True, True),      # checkpointed, camera ids (int64) travel beside the tokens
    ("zb-v", 4, {}, False, False),     # two stages per rank, local hand-offs
]


def _label(config: tuple[Any, ...]) -> str:
    name, stages, _options, checkpoint, with_ids = config
    return f"{name}-S{stages}" + ("-ckpt" if checkpoint else "") + ("-ids" if with_ids else "")


def _worker(rank: int, world_size: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for config in CONFIGS:
        name, num_stages, options, checkpoint, with_ids = config
        if name not in pipeplan.SCHEDULES:
            continue
        schedule = pipeplan.build_schedule(name, num_stages=num_stages, num_microbatches=MICROBATCHES, **options)
        stages = make_stages(num_stages, with_ids)
        runtime = PipelineRuntime(stages, schedule, loss_fn, checkpoint=checkpoint)
        losses = []
        for step, shapes in enumerate(STEPS):
            inputs, targets = make_microbatches(step, shapes)
            losses.append(runtime.step_microbatches(inputs, targets).loss)
        out[_label(config)] = {
            "losses": losses,
            "grads": {s: [p.grad.clone() for p in stages[s].parameters()] for s in runtime.local_stages},
            "headers_cached": len(runtime._known_headers),
        }
    try:
        runtime.step_microbatches(*make_microbatches(0, STEPS[0][:3]))
        out["too_few"] = "accepted"
    except InvalidInputError as error:
        out["too_few"] = str(error)
    return out


@pytest.fixture(scope="module")
def results() -> list[dict[str, Any]]:
    return spawn(_worker, 2, timeout=60)


def _reference(num_stages: int, with_ids: bool) -> tuple[list[float], list[list[Any]]]:
    stages = make_stages(num_stages, with_ids)
    model = nn.Sequential(*stages)
    losses = []
    for step, shapes in enumerate(STEPS):
        inputs, targets = make_microbatches(step, shapes)
        total = sum(samples for _cameras, samples in shapes)
        loss = sum(loss_fn(model(x), y) * (x.shape[0] / total) for x, y in zip(inputs, targets))
        loss.backward()
        losses.append(float(loss.detach()))
    return losses, [[p.grad.clone() for p in stage.parameters()] for stage in stages]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("config", CONFIGS, ids=[_label(c) for c in CONFIGS])
def test_mixed_shape_microbatches_match_one_process(results: list[dict[str, Any]], config: tuple[Any, ...]) -> None:
    name, num_stages, _options, _checkpoint, with_ids = config
    if name not in pipeplan.SCHEDULES:
        pytest.skip(f"schedule {name!r} not built")
    ref_losses, ref_grads = _reference(num_stages, with_ids)
    seen = set()
    for per_rank in results:
        entry = per_rank[_label(config)]
        assert entry["losses"] == pytest.approx(ref_losses, abs=TOLERANCE)
        # two distinct shape signatures: the third step reused the first's headers
        assert entry["headers_cached"] == 2
        for stage, grads in entry["grads"].items():
            seen.add(stage)
            assert len(grads) == len(ref_grads[stage])
            for got, want in zip(grads, ref_grads[stage]):
                assert torch.allclose(got, want, atol=TOLERANCE, rtol=0), (stage, float((got - want).abs().max()))
    assert seen == set(range(num_stages))


@pytest.mark.timeout(120)
def test_a_wrong_count_of_microbatches_is_refused(results: list[dict[str, Any]]) -> None:
    for per_rank in results:
        assert per_rank["too_few"] == "inputs must be a list of the schedule's 4 microbatches, got 3 entries"


def _bad_worker(rank: int, world_size: int) -> float:
    stages = make_stages(2, False)
    runtime = PipelineRuntime(stages, pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=4), loss_fn)
    inputs, targets = make_microbatches(0, [(1, 2), (4, 2), (5, 2), (2, 2)])  # 5 cameras: 10 tokens
    return runtime.step_microbatches(inputs, targets).loss


_children = live_children


@pytest.mark.timeout(60)
def test_a_microbatch_the_stage_cannot_take_stops_every_rank_in_one_line() -> None:
    before = _children()  # what earlier tests left running (multiprocessing's resource tracker) is not ours
    # rank 0 is stopped at once: the run ends within this test's 60 s, long before its 600 s timeout
    # (no wall-clock bound of the test's own, which a loaded machine could break)
    with pytest.raises(RuntimeFailure) as info:
        spawn(_bad_worker, 2, timeout=600)
    message = str(info.value)
    assert message.startswith(
        "rank 1 failed in F(stage 1, mb 2): ValueError: a sequence of 10 tokens, more than the head's 8 positions"
    ), message
    assert "\n" not in message
    deadline = time.monotonic() + 30  # the ranks are reaped as they exit: give a loaded machine a moment
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not _children() - before  # no process left behind

"""The runtime on CUDA with NCCL (skipped without a GPU; CI has none).

With two or more GPUs, two ranks run 1F1B and ZB-H1 across GPUs; with one GPU,
one rank runs a two-stage schedule on it (NCCL cannot put two ranks on one GPU).
Gradients must equal a single-process step within 1e-5, as on CPU.
"""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

import pipeplan  # noqa: E402
from pipeplan import Action, Schedule  # noqa: E402
from pipeplan.runtime import PipelineRuntime, spawn  # noqa: E402

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


def _stages() -> list[Any]:
    torch.manual_seed(0)
    return [nn.Sequential(nn.Linear(16, 16), nn.GELU(), nn.LayerNorm(16)) for _ in range(2)]


def _loss(output: Any, target: Any) -> Any:
    return ((output - target) ** 2).mean()


def _batch() -> tuple[Any, Any]:
    generator = torch.Generator().manual_seed(1)
    return torch.randn(34, 16, generator=generator), torch.randn(34, 16, generator=generator)


def _one_rank_schedule(backward: str) -> Schedule:
    """Both stages on rank 0: F0 F1 of each microbatch, then the backwards (and Ws)."""
    order = []
    for mb in range(4):
        order += [Action("F", 0, mb), Action("F", 1, mb)]
    for mb in range(4):
        if backward == "split":
            order += [Action("I", 1, mb), Action("I", 0, mb), Action("W", 1, mb), Action("W", 0, mb)]
        else:
            order += [Action("B", 1, mb), Action("B", 0, mb)]
    return Schedule([order], [0, 0], 4, name=f"one-rank-{backward}")


def _worker(rank: int, world_size: int) -> list[tuple[str, float, dict[int, list[Any]]]]:
    out = []
    if world_size == 1:
        schedules = [_one_rank_schedule("full"), _one_rank_schedule("split")]
    else:
        schedules = [pipeplan.build_schedule(name, num_stages=2, num_microbatches=4) for name in ("1f1b", "zb-h1")]
    for schedule in schedules:
        for checkpoint in (False, True):
            stages = _stages()
            runtime = PipelineRuntime(stages, schedule, _loss, checkpoint=checkpoint)
            assert runtime.device.type == "cuda"
            inputs, targets = _batch()
            result = runtime.step(inputs.cuda(), targets.cuda())
            grads = {s: [p.grad.cpu() for p in stages[s].parameters()] for s in runtime.local_stages}
            out.append((f"{schedule.name}-{checkpoint}", result.loss, grads))
    return out


@pytest.mark.timeout(300)
def test_nccl_gradients_match_single_process() -> None:
    world_size = min(2, torch.cuda.device_count())
    results = spawn(_worker, world_size, backend="nccl", timeout=120)
    stages = _stages()
    inputs, targets = _batch()
    loss = _loss(nn.Sequential(*stages)(inputs), targets)
    loss.backward()
    for index in range(len(results[0])):
        seen = set()
        for per_rank in results:
            label, got_loss, grads = per_rank[index]
            assert abs(got_loss - loss.item()) <= 1e-5, label
            for stage, values in grads.items():
                seen.add(stage)
                for got, param in zip(values, stages[stage].parameters()):
                    assert float((got - param.grad).abs().max()) <= 1e-5, label
        assert seen == {0, 1}

"""Benchmark: a step planned on a calibrated device file against the same step measured by pipeplan's runtime.

    python benchmarks/device_step.py --device gpu_device.json --backend nccl --nproc 2   # one GPU per rank
    python benchmarks/device_step.py --device cpu_device.json --backend gloo --layers 2 --hidden 128 --seq 64

Protocol:

1. A small GPT-like stack (``--layers`` pre-norm blocks of ``--hidden`` width,
   ``--heads`` heads, sequence ``--seq``, MLP 4× wide, biases) exists twice: as a
   :class:`~pipeplan.models.spec.ModelSpec` (one ``TransformerStack``) and as a
   torch ``nn.Sequential`` of the same blocks (:func:`build_blocks`; bfloat16 on
   CUDA, float32 on CPU, like the calibration's kernels).
2. **Planned**: ``layer_profile(spec, device, b)`` on the device file's Device
   (``b = batch / microbatches``), with the file's measured p2p link as the
   profile's message model; nothing of the run is measured for it.
3. **Measured**: :func:`pipeplan.runtime.loop.run_pipeline` with that profile
   (``partition even``): the prediction beside the run is
   :func:`pipeplan.predict.predict` on it and the comparison
   :func:`pipeplan.predict.compare.compare`, as in benchmarks/fidelity.py.
4. Printed per schedule: predicted and measured (median) makespan, ms, and
   predicted / measured.

The gradient check of the run compares with a float32-tolerance reference; in
bfloat16 it reports a mismatch, which says nothing about timing (printed as a note).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path
from typing import Any

_SHAPE_ENV = "PIPEPLAN_DEVICE_STEP_SHAPE"  # "layers,hidden,heads,seq" for the ranks' model factory


def build_blocks() -> tuple[Any, Any, Any]:
    """``(nn.Sequential of blocks, loss_fn, make_batch)`` of the shape in ``$PIPEPLAN_DEVICE_STEP_SHAPE``."""
    import torch
    from torch import nn

    layers, hidden, heads, seq = (int(v) for v in os.environ.get(_SHAPE_ENV, "4,1024,16,256").split(","))
    dtype = torch.bfloat16 if torch.cuda.is_available() else torch.float32

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(hidden), nn.LayerNorm(hidden)
            self.qkv, self.proj = nn.Linear(hidden, 3 * hidden), nn.Linear(hidden, hidden)
            self.up, self.down = nn.Linear(hidden, 4 * hidden), nn.Linear(4 * hidden, hidden)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            batch = x.shape[0]
            q, k, v = self.qkv(self.norm1(x)).view(batch, seq, 3, heads, hidden // heads).permute(2, 0, 3, 1, 4)
            attended = nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(attended.transpose(1, 2).reshape(batch, seq, hidden))
            return x + self.down(nn.functional.gelu(self.up(self.norm2(x))))

    torch.manual_seed(0)
    model = nn.Sequential(*(Block() for _ in range(layers))).to(dtype)

    def loss_fn(output: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return nn.functional.mse_loss(output.float(), target.float())

    def make_batch(batch_size: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
        generator = torch.Generator().manual_seed(seed)
        inputs = torch.randn(batch_size, seq, hidden, generator=generator).to(dtype)
        return inputs, torch.randn(batch_size, seq, hidden, generator=generator).to(dtype)

    return model, loss_fn, make_batch


def _spec(layers: int, hidden: int, heads: int, seq: int) -> Any:
    from pipeplan.models.modules import TransformerStack
    from pipeplan.models.spec import ModelSpec

    stack = TransformerStack(name="layers", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq,
                             ffn_hidden_size=4 * hidden, bias=True)
    return ModelSpec("device-step-gpt", (stack,), "benchmarks/device_step.py: a small GPT-like stack")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", required=True, help="a device file from pipeplan calibrate")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default="nccl")
    parser.add_argument("--nproc", type=int, default=2, help="pipeline ranks (one GPU each on NCCL)")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--heads", type=int, default=16)
    parser.add_argument("--seq", type=int, default=256)
    parser.add_argument("--batch", type=int, default=8, help="samples per step")
    parser.add_argument("--microbatches", type=int, default=4)
    parser.add_argument("--schedules", default="1f1b,zb-h1")
    parser.add_argument("--steps", type=int, default=5)
    args = parser.parse_args(argv)

    from pipeplan.calibration import Calibration
    from pipeplan.hardware.device_file import read_device
    from pipeplan.models.layer_costs import layer_profile
    from pipeplan.runtime.loop import RunConfig, run_pipeline

    loaded = read_device(args.device)
    os.environ[_SHAPE_ENV] = f"{args.layers},{args.hidden},{args.heads},{args.seq}"
    sys.path.insert(0, str(Path(__file__).resolve().parent))  # the ranks (which inherit sys.path) import device_step
    micro_batch_size = args.batch // args.microbatches
    profile = layer_profile(_spec(args.layers, args.hidden, args.heads, args.seq), loaded.device, micro_batch_size,
                            recompute="none")
    if loaded.p2p is not None:
        profile = dataclasses.replace(profile, calibration=Calibration(
            latency=loaded.p2p.latency_ms, bandwidth=loaded.p2p.bandwidth / 1e3, backend=args.backend))
    print(f"device file {args.device}: {loaded.device.name}, GEMM efficiency {loaded.device.gemm_efficiency:.1%}, "
          f"p2p {'measured' if loaded.p2p is not None else 'none (messages cost nothing in the plan)'}")
    print(f"model: {args.layers} blocks, hidden {args.hidden}, {args.heads} heads, seq {args.seq}; "
          f"b {micro_batch_size} x m {args.microbatches}; {args.nproc} ranks on {args.backend}")
    print(f"{'schedule':<12} {'predicted ms':>13} {'measured ms':>12} {'predicted/measured':>19}")
    for schedule in args.schedules.split(","):
        config = RunConfig(schedule=schedule, pp=args.nproc, microbatches=args.microbatches, batch_size=args.batch,
                           model="device_step:build_blocks", partition="even", steps=args.steps, warmup=2,
                           profile=profile)
        report = run_pipeline(config, backend=args.backend)
        predicted = report["prediction"]["predicted_makespan"]
        measured = report["makespan_ms"]["median"]
        print(f"{schedule:<12} {predicted:>13.4g} {measured:>12.4g} {predicted / measured:>19.3f}")
        if not report["gradient_check"]["ok"]:
            print(f"  note: gradient check off by {report['gradient_check']['max_abs_diff']:.3g} "
                  "(bfloat16 against a float32 tolerance)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

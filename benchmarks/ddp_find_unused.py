"""Benchmark: the host cost of DDP's ``find_unused_parameters=True`` per autograd node, measured on CPU.

    PYTHONPATH=src /work/engvenv/bin/python benchmarks/ddp_find_unused.py            # print the table
    PYTHONPATH=src /work/engvenv/bin/python benchmarks/ddp_find_unused.py --write    # also record it in docs/engines.md

With ``find_unused_parameters=True``, ``DistributedDataParallel`` walks the autograd graph
from the forward's outputs before every backward that synchronises gradients
(``DistributedDataParallel._post_forward`` → ``reducer.prepare_for_backward(outputs)``,
torch/nn/parallel/distributed.py; under ``no_sync`` it is skipped, and
torch.distributed.pipelining calls it once per step, before each stage's last backward:
``PipelineStage.backward_maybe_with_nosync``), marking the parameters the graph does not
reach. Off, ``prepare_for_backward([])`` walks nothing. The walk is host work that grows
with the graph.

A chain of ``N`` ``Linear(8, 8)`` layers (2 parameter tensors each), each followed by ``k``
parameter-free ``tanh`` ops, so that autograd nodes and parameter tensors vary apart, is
wrapped in ``DistributedDataParallel`` on 2 gloo processes (forked, one thread each), once
with the flag off and once on. Each step's forward + backward is timed in CPU seconds of
rank 0's process (``time.process_time``: what the host spends, not waiting), the median of
:data:`STEPS` steps after :data:`WARMUP`. The autograd nodes of one forward are counted by
walking ``grad_fn.next_functions`` from the loss (the parameters' ``AccumulateGrad`` nodes
included). The extra CPU milliseconds with the flag on are fitted to ``a + b·tensors + c·nodes``
by least squares over every row (``numpy.linalg.lstsq``): the walk visits every node, then DDP
looks up every parameter's gradient accumulator among those seen and all-reduces the map of
used parameters (``Reducer::search_unused_parameters``, ``local_used_map_``). ``b`` and ``c`` are
what pipeplan prices (``FIND_UNUSED_US`` in pipeplan/engines/pipelining.py); ``a``, a constant
per step that holds gloo's all-reduce of that map on CPU, is not.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import measured_line, print_or_write  # noqa: E402

DOC = Path(__file__).resolve().parents[1] / "docs" / "engines.md"
MARKER = "ddp-find-unused"
COMMAND = "python benchmarks/ddp_find_unused.py --write"

#: layers in the chain
LAYERS = (64, 256, 1024, 4096)
#: parameter-free ops after each layer
EXTRA_OPS = (0, 3, 9)
#: width of each layer
WIDTH = 8
#: untimed steps, then timed steps (the median is kept); the two settings alternate step by step
WARMUP, STEPS = 3, 31
#: processes
RANKS = 2


def _model(layers: int, extra: int) -> Any:
    import torch

    class Chain(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.layers = torch.nn.ModuleList(torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers))

        def forward(self, x: Any) -> Any:
            for layer in self.layers:
                x = layer(x)
                for _ in range(extra):
                    x = torch.tanh(x)
            return x

    return Chain()


def count_nodes(output: Any) -> int:
    """Autograd nodes reachable from ``output.grad_fn`` (each counted once, ``AccumulateGrad`` included)."""
    seen: set[Any] = set()
    stack = [output.grad_fn]
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        stack.extend(child for child, _ in node.next_functions)
    return len(seen)


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def rank(rank_: int, world: int) -> dict[str, Any]:
    """One process: every (layers, extra ops) with the flag off and on; rank 0's medians (others ``{}``)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    results: dict[str, Any] = {}
    for layers in LAYERS:
        for extra in EXTRA_OPS:
            torch.manual_seed(0)
            nets = {flag: DistributedDataParallel(_model(layers, extra), find_unused_parameters=flag)
                    for flag in (False, True)}  # two models: each DDP's reducer hooks only its own parameters
            x = torch.ones(4, WIDTH)
            nodes = count_nodes(nets[False](x).sum())
            samples: dict[bool, list[float]] = {False: [], True: []}
            for index in range(WARMUP + STEPS):
                for flag, net in nets.items():  # alternate, so a load change hits both alike
                    start = time.process_time()
                    net(x).sum().backward()
                    elapsed = time.process_time() - start
                    net.zero_grad(set_to_none=True)
                    if index >= WARMUP:
                        samples[flag].append(elapsed)
            results[f"{layers} {extra}"] = {"nodes": nodes, "tensors": 2 * layers,
                                            "off": _median(samples[False]), "on": _median(samples[True])}
    return results if rank_ == 0 else {}


def measure() -> dict[str, Any]:
    """``{"N k": {"nodes", "tensors", "off", "on"}}``: rank 0's medians, CPU seconds per forward + backward."""
    from pipeplan.runtime import spawn

    return spawn(rank, RANKS, timeout=600)[0]


def fit(tensors: list[float], nodes: list[float], ys: list[float]) -> tuple[float, float, float]:
    """``(a, b, c)`` of the least-squares plane ``y = a + b·tensors + c·nodes`` (``numpy.linalg.lstsq``)."""
    import numpy

    design = numpy.column_stack([numpy.ones(len(ys)), tensors, nodes])
    (a, b, c), *_ = numpy.linalg.lstsq(design, numpy.asarray(ys, dtype=float), rcond=None)
    return float(a), float(b), float(c)


def block() -> str:
    """The markdown table (extra host ms with the flag on, per row) and the fit per node and per tensor."""
    import torch

    results = measure()
    lines = ["| layers | ops per layer | autograd nodes | parameter tensors | off (ms) | on (ms) | extra (ms) "
             "| µs per node |",
             "|---:|---:|---:|---:|---:|---:|---:|---:|"]
    nodes, tensors, extra = [], [], []
    for layers in LAYERS:
        for ops in EXTRA_OPS:
            row = results[f"{layers} {ops}"]
            more = 1e3 * (row["on"] - row["off"])
            nodes.append(row["nodes"])
            tensors.append(row["tensors"])
            extra.append(more)
            lines.append(f"| {layers} | {1 + ops} | {row['nodes']} | {row['tensors']} | {1e3 * row['off']:.2f} | "
                         f"{1e3 * row['on']:.2f} | {more:+.2f} | {1e3 * more / row['nodes']:+.2f} |")
    a, b, c = fit(tensors, nodes, extra)
    text = "\n".join(lines)
    text += (f"\n\nFit over every row (least squares): extra ms = {a:+.2f} + **{1e3 * b:.2f} µs per parameter "
             f"tensor** × tensors + **{1e3 * c:.2f} µs per autograd node** × nodes. Rows: "
             "`DistributedDataParallel` over a chain of "
             f"`Linear({WIDTH}, {WIDTH})` layers, each followed by ops − 1 `tanh`, `find_unused_parameters` off "
             f"and on, {RANKS} gloo processes (forked), one thread each; CPU milliseconds of rank 0's process per "
             f"forward + backward (`time.process_time`), medians of {STEPS} steps after {WARMUP}, the two settings "
             f"alternating; torch {torch.__version__}.")
    return text + "\n\n" + measured_line(COMMAND)


def main(argv: list[str] | None = None) -> int:
    return print_or_write(DOC, MARKER, block, __doc__.splitlines()[0], argv)


if __name__ == "__main__":
    raise SystemExit(main())

"""Measurement: the bytes torchtitan's llama3 block and loss keep for their backward, on CPU, against pipeplan's.

    PYTHONPATH=src:.venv/torchtitan-toml python benchmarks/torchtitan_activations.py          # the table
    PYTHONPATH=src:.venv/torchtitan-toml python benchmarks/torchtitan_activations.py --loss   # the loss too

Needs the engines' Python (torch, torchtitan's dependencies) and torchtitan 0.2.2 first on the path (the
TOML release, ``tests/_torchtitan_toml.py``: the side install ``.venv/torchtitan-toml``); runs in one process on CPU in about a minute (no GPU, no second process:
tensor parallelism runs on PyTorch's fake process group, which returns buffers of the right shapes).

**What is run.** torchtitan's own llama3 ``Transformer`` with one block (torchtitan/models/llama3/
model/model.py) at small, Llama-proportioned dimensions (:data:`SHAPE`: dim 1024, 32 heads, 8 KV
heads, torchtitan's SwiGLU width rule with multiplier 1.3 and ``multiple_of`` 256, as the 8B
flavour; seq 256, batch 2, bf16 weights, SDPA), through torchtitan's own ``apply_tp`` at ``tp > 1``
(models/llama3/infra/parallelize.py: DTensor sequence parallelism, ``SequenceParallel`` norms,
``PrepareModuleInput`` to ``Replicate``, ``ColwiseParallel`` wq/wk/wv/w1/w3, ``RowwiseParallel``
wo/w2 to ``Shard(1)``) on a device mesh of the fake process group, and its own ``apply_ac``
(distributed/activation_checkpoint.py) under ``mode = "none"`` (not applied), ``selective`` with
``selective_ac_option = "op"`` (its ``_op_sac_save_list``, plus CPU's flash kernel
``_scaled_dot_product_flash_attention_for_cpu``, the counterpart of the CUDA
``_scaled_dot_product_flash_attention`` the list names) and ``full``.

**What is counted** (:func:`kept_bytes`): a ``TorchDispatchMode`` keeps a weak reference to the
storage of every tensor an op returns from the block's input (a copy made inside, as the previous
block's output is) through its forward (a DTensor's local tensor), so tensors saved by autograd and
tensors selective checkpointing caches outside autograd's hooks are both seen; after the forward
(and a ``gc.collect()``) the bytes of the storages still alive, less the block's output (the next
block's input, counted there), are what the block keeps for its backward per microbatch ("of which
(batch, seq, dim)": those of the whole sequence, at ``tp > 1`` the gathered inputs); then the peak
of live bytes through its backward, less its weight gradients. pipeplan's numbers: the same
block's ``activation_bytes`` of ``Workload.from_spec(spec).with_tensor_parallel(tp).profile(batch,
mode)``, the torch engines' gathered extra of pipeplan/planner/memory.py, and what pipeplan holds at
the block's backward (stored; for a recomputed block the ``none`` bytes plus that extra).

``--loss``: torchtitan's ``cross_entropy_loss`` (components/loss.py) on bf16 logits made by a
projection, eager and ``torch.compile``\ d (inductor on CPU), in units of ``L`` = the fp32 logits'
bytes: kept after the forward and the peak through the backward, from ``torch.profiler``'s CPU
allocator events (a dispatch mode does not see inside a compiled graph).

``--small --json`` (:data:`SMALL`, a few seconds) is what tests/test_torch_engine_memory.py runs.
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

MODES = ("none", "op", "full")
#: Print each kept storage (the op that made it, its shape) to stderr.
DEBUG = False


@dataclass(frozen=True)
class Shape:
    """A llama3 block's dimensions and a microbatch (torchtitan's ``TransformerModelArgs`` names)."""

    dim: int = 1024
    n_heads: int = 32
    n_kv_heads: int = 8
    ffn_dim_multiplier: float = 1.3
    multiple_of: int = 256
    seq: int = 256
    batch: int = 2
    vocab: int = 4096


SHAPE = Shape()


def _local(t: torch.Tensor) -> torch.Tensor:
    """The tensor holding ``t``'s bytes: a DTensor's shard, an ``AsyncCollectiveTensor``'s result, or ``t``."""
    for inner in ("_local_tensor", "elem"):
        if isinstance(getattr(t, inner, None), torch.Tensor):
            return _local(getattr(t, inner))
    return t


class _Storages(TorchDispatchMode):
    """Weak references to the storage of every tensor an op returns, and the live bytes at each op."""

    def __init__(self, before: tuple[torch.Tensor, ...] = ()) -> None:
        super().__init__()
        self.before = {_local(t).untyped_storage().data_ptr() for t in before}  # parameters, buffers, inputs
        self.refs: dict[int, tuple[StorageWeakRef, int]] = {}
        self.peak = 0
        self.made: dict[int, str] = {}
        self.shapes: dict[int, tuple[int, ...]] = {}

    def track(self, t: torch.Tensor, label: str) -> None:
        try:
            storage = _local(t).untyped_storage()
            key = storage.data_ptr()
        except RuntimeError:  # a wrapper without storage of its own
            return
        if not key or key in self.before:
            return
        if key not in self.refs or self.refs[key][0].expired():  # a new storage (maybe at a freed one's address)
            self.refs[key] = (StorageWeakRef(storage), storage.nbytes())
            self.made[key] = label
            self.shapes[key] = tuple(_local(t).shape)

    def live(self, exclude: tuple[torch.Tensor, ...] = (), shape: tuple[int, ...] | None = None) -> int:
        """Bytes of the tracked storages still alive, less ``exclude``'s (only those first made at ``shape``)."""
        gone = {_local(t).untyped_storage().data_ptr() for t in exclude}
        return sum(n for key, (ref, n) in self.refs.items() if not ref.expired() and key not in gone
                   and (shape is None or self.shapes.get(key) == shape))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor):
                self.track(t, f"{func} {tuple(_local(t).shape)} {t.dtype}")
        self.peak = max(self.peak, self.live())
        return out


def _torchtitan() -> Any:
    try:
        import torchtitan.distributed.activation_checkpoint as ac  # noqa: F401
        from torchtitan.config.job_config import ActivationCheckpoint  # noqa: F401
    except ImportError as error:  # not the TOML release, or none
        raise SystemExit(f"needs torchtitan 0.2.2 on PYTHONPATH (.venv/torchtitan-toml): {error}") from None
    return ac


def build_block(shape: Shape, mode: str, tp: int, mesh: Any = None) -> tuple[torch.nn.Module, torch.Tensor]:
    """torchtitan's llama3 block at ``shape`` in bf16 and its RoPE table: a one-layer ``Transformer`` through
    torchtitan's ``apply_tp`` (``tp > 1``, on ``mesh``; loss parallel, bf16 linears) and ``apply_ac`` (``mode``)."""
    from torchtitan.config.job_config import ActivationCheckpoint
    from torchtitan.distributed.activation_checkpoint import apply_ac
    from torchtitan.models.llama3.infra import parallelize
    from torchtitan.models.llama3.model.args import TransformerModelArgs
    from torchtitan.models.llama3.model.model import Transformer

    args = TransformerModelArgs(dim=shape.dim, n_layers=1, n_heads=shape.n_heads, n_kv_heads=shape.n_kv_heads,
                                ffn_dim_multiplier=shape.ffn_dim_multiplier, multiple_of=shape.multiple_of,
                                vocab_size=shape.vocab, max_seq_len=shape.seq)
    torch.manual_seed(0)
    model = Transformer(args)
    with torch.no_grad():
        model.init_weights()
    for param in model.parameters():  # bf16 weights (FSDP's bf16 compute); the complex RoPE table stays
        param.data = param.data.to(torch.bfloat16)
    if tp > 1:
        parallelize.apply_tp(model, mesh, loss_parallel=True, enable_float8_tensorwise_tp=False)
    if mode != "none":
        config = ActivationCheckpoint(mode="full" if mode == "full" else "selective", selective_ac_option="op")
        # the CPU flash kernel, where CUDA's _scaled_dot_product_flash_attention is in torchtitan's list
        save = set(parallelize._op_sac_save_list) | {torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default}
        apply_ac(model, config, op_sac_save_list=save)
    return model.layers["0"], model.freqs_cis[: shape.seq]


@dataclass(frozen=True)
class Kept:
    """One block's bytes, measured: kept after the forward, and the most alive during its backward."""

    kept: int
    backward_peak: int
    ops: tuple[str, ...]
    full_sequence: int = 0  # of ``kept``, tensors of the whole sequence's (batch, seq, dim): at tp > 1, gathered
    weight_grads: int = 0  # the block's parameter gradients (bf16, this rank's shards), in ``backward_peak``


def kept_bytes(shape: Shape, mode: str, tp: int = 1, mesh: Any = None) -> Kept:
    """Bytes the block keeps for its backward per microbatch (module doc), and the peak of live bytes created from
    the forward's start to the backward's end beyond the parameters (the kept bytes, the recomputed forward's,
    the gradients' working set, the parameter gradients)."""
    block, freqs = build_block(shape, mode, tp, mesh)
    x0 = torch.randn(shape.batch, shape.seq // tp, shape.dim, dtype=torch.bfloat16, requires_grad=True)
    gc.collect()
    tracker = _Storages((x0, freqs, *block.parameters(), *block.buffers()))
    with tracker:
        x = x0.clone()  # the block's input as the previous block's output: alive after the forward if kept
        out = block(x, freqs, None)
        del x
    gc.collect()
    kept = tracker.live(exclude=(out,))
    full_sequence = tracker.live(exclude=(out,), shape=(shape.batch, shape.seq, shape.dim))
    if DEBUG:
        for key, (ref, n) in tracker.refs.items():
            if not ref.expired():
                print(f"    {n / 2**20:8.3f} MiB {tracker.made.get(key)}", file=sys.stderr)
    ops = tuple(sorted(_ops_seen(block, x0, freqs)))
    tracker.peak = 0
    grad = torch.ones_like(out)
    with tracker:
        out.backward(grad)
    weight_grads = sum(_local(p.grad).untyped_storage().nbytes() for p in block.parameters() if p.grad is not None)
    return Kept(kept, tracker.peak, ops, full_sequence, weight_grads)


def _ops_seen(block: torch.nn.Module, x: torch.Tensor, freqs: torch.Tensor) -> set[str]:
    """The attention kernels the forward runs (to say which SDPA backend ran)."""
    names: set[str] = set()

    class Ops(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if "attention" in str(func):
                names.add(str(func))
            return func(*args, **(kwargs or {}))

    with torch.no_grad(), Ops():
        block(x.detach(), freqs, None)
    return names


def pipeplan_bytes(shape: Shape, mode: str, tp: int) -> float:
    """pipeplan's ``activation_bytes`` of the same block (torchtitan's llama3 as ``llama3_spec`` builds it)."""
    from pipeplan import hardware
    from pipeplan.planner import Workload

    work = Workload.from_spec(_spec(shape), hardware.device("h100-80g")).with_tensor_parallel(tp).with_recompute(mode)
    profile = work.profile(shape.batch, mode)
    return float(profile.activation_bytes[profile.names.index("layers.0")])


def _spec(shape: Shape) -> Any:
    """pipeplan's spec of a one-block torchtitan llama3 at ``shape`` (as ``llama3_spec`` builds the flavours)."""
    from pipeplan.models.modules import Embedding, LMHead, TransformerStack
    from pipeplan.models.spec import ModelSpec

    ffn = _ffn(shape)
    return ModelSpec("llama3-small", (
        Embedding(name="tok_embeddings", vocab_size=shape.vocab, hidden_size=shape.dim, tokens=shape.seq),
        TransformerStack(name="layers", num_layers=1, hidden_size=shape.dim, num_heads=shape.n_heads,
                         seq_length=shape.seq, ffn_hidden_size=ffn, num_kv_heads=shape.n_kv_heads, gated_mlp=True,
                         norm="rmsnorm", causal=True, attention="flash", final_norm=True),
        LMHead(name="output", vocab_size=shape.vocab, hidden_size=shape.dim, tokens=shape.seq),
    ), "torchtitan llama3 block, benchmarks/torchtitan_activations.py")


def _ffn(shape: Shape) -> int:
    hidden = int(shape.ffn_dim_multiplier * int(2 * 4 * shape.dim / 3))
    return shape.multiple_of * -(-hidden // shape.multiple_of)


@contextmanager
def fake_mesh(tp: int) -> Iterator[Any]:
    """A one-dimensional device mesh of ``tp`` CPU ranks on PyTorch's fake process group (this process is rank 0)."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=tp)
    try:
        yield init_device_mesh("cpu", (tp,))
    finally:
        dist.destroy_process_group()


def _allocated(run: Callable[[], Any]) -> tuple[Any, int, int]:
    """``run()``'s result, the bytes it left allocated and the most it had allocated at once (CPU allocator events
    of ``torch.profiler``: they see a compiled graph's buffers, which a dispatch mode does not)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        result = run()
    # each op's own allocations at its start, its own frees (a node releasing what it saved) at its end
    changes = sorted((e.time_range.start if e.self_cpu_memory_usage > 0 else e.time_range.end, e.self_cpu_memory_usage)
                     for e in prof.events() if e.self_cpu_memory_usage)
    live = peak = 0
    for _, change in changes:
        live += change
        peak = max(peak, live)
    return result, live, peak


def loss_bytes(tokens: int, vocab: int, compiled: bool, dim: int = 32) -> tuple[float, float]:
    """``(kept after the forward, peak through the backward)`` of torchtitan's ``cross_entropy_loss``
    (components/loss.py: ``cross_entropy(pred.flatten(0, 1).float(), ...)``), eager or compiled, in units
    of the fp32 logits' bytes ``L``, the bf16 logits made by an output projection from ``dim`` features (so they are
    counted if the loss keeps them); the projection's own gradients (``(tokens + vocab) × dim`` bf16, 1% of ``L`` at
    the defaults) are in the peak."""
    torch.manual_seed(0)
    hidden = torch.randn(tokens, dim, dtype=torch.bfloat16, requires_grad=True)
    weight = torch.randn(vocab, dim, dtype=torch.bfloat16, requires_grad=True)
    labels = torch.randint(0, vocab, (tokens,))

    from torchtitan.components.loss import cross_entropy_loss  # (pred.flatten(0, 1).float(), ..., reduction="sum")

    fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = (torch.compile(cross_entropy_loss) if compiled
                                                                 else cross_entropy_loss)
    labels = labels.unsqueeze(0)
    for _ in range(2):  # compile (and warm the allocator) outside the count
        fn((hidden @ weight.t()).unsqueeze(0), labels).backward()
        hidden.grad = weight.grad = None
    unit = tokens * vocab * 4
    gc.collect()
    loss, kept, _ = _allocated(lambda: fn((hidden @ weight.t()).unsqueeze(0), labels))
    _, _, peak = _allocated(loss.backward)
    return kept / unit, (kept + peak) / unit


def gathered_bytes(shape: Shape, tp: int) -> float:
    """What pipeplan's memory model adds per recomputed block under a torch engine at ``tp``: ``(1 − 1/t)`` of
    :func:`~pipeplan.models.layer_costs.gathered_input_bytes` (the whole-sequence bytes less the profile's shard)."""
    from pipeplan.models.layer_costs import gathered_input_bytes

    return gathered_input_bytes(_spec(shape), shape.batch)[1] * (1 - 1 / tp)


def rows(shape: Shape, tps: tuple[int, ...]) -> list[dict[str, Any]]:
    """Per tp and mode: the measured bytes (kept, of which whole-sequence, backward peak) and pipeplan's."""
    out = []
    for tp in tps:
        with (fake_mesh(tp) if tp > 1 else _nothing()) as mesh:
            for mode in MODES:
                got = kept_bytes(shape, mode, tp, mesh)
                stored, extra = pipeplan_bytes(shape, mode, tp), gathered_bytes(shape, tp) if tp > 1 else 0.0
                # what pipeplan holds at the block's backward: stored, and a recomputed block's transient
                held = stored if mode == "none" else pipeplan_bytes(shape, "none", tp) + extra
                out.append({"tp": tp, "mode": mode, "kept": got.kept, "full_sequence": got.full_sequence,
                            "backward_peak": got.backward_peak, "pipeplan": stored, "gathered_extra": extra,
                            "pipeplan_backward": held, "weight_grads": got.weight_grads, "ops": list(got.ops)})
    return out


def table(shape: Shape, results: list[dict[str, Any]]) -> list[str]:
    """The rows as Markdown, in MiB."""
    mib = 2**20
    lines = [f"llama3 block: dim {shape.dim}, heads {shape.n_heads}/{shape.n_kv_heads}, ffn {_ffn(shape)}, "
             f"seq {shape.seq}, batch {shape.batch}, bf16 (attention kernels: {', '.join(results[0]['ops'])})", "",
             "| tp | mode | measured kept | of which (batch, seq, dim) | pipeplan stored | pipeplan / measured | "
             "torch engines' gathered extra | measured backward peak less weight gradients | pipeplan at the "
             "backward | pipeplan / measured |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in results:
        lines.append(f"| {r['tp']} | {r['mode']} | {r['kept'] / mib:.2f} | "
                     f"{r['full_sequence'] / mib if r['tp'] > 1 else float('nan'):.2f} | {r['pipeplan'] / mib:.2f} | "
                     f"{r['pipeplan'] / r['kept']:.3f} | {r['gathered_extra'] / mib:.2f} | "
                     f"{(r['backward_peak'] - r['weight_grads']) / mib:.2f} | {r['pipeplan_backward'] / mib:.2f} | "
                     f"{r['pipeplan_backward'] / (r['backward_peak'] - r['weight_grads']):.3f} |")
    return lines


@contextmanager
def _nothing() -> Iterator[None]:
    yield None


#: The small shape ``--small`` measures (tests/test_torchtitan_activations.py: a few seconds).
SMALL = Shape(dim=256, n_heads=8, n_kv_heads=2, seq=64, batch=2)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tp", default="1,2,4,8", help="tensor-parallel degrees, comma-separated")
    parser.add_argument("--loss", action="store_true", help="also measure the loss, eager and compiled")
    parser.add_argument("--small", action="store_true", help="the small shape (SMALL) instead of SHAPE")
    parser.add_argument("--json", action="store_true", help="print the block rows as JSON")
    args = parser.parse_args(argv)
    _torchtitan()
    shape = SMALL if args.small else SHAPE
    results = rows(shape, tuple(int(t) for t in args.tp.split(",")))
    if args.json:
        print(json.dumps(results))
        return 0
    print("\n".join(table(shape, results)))
    if args.loss:
        print("\n| loss (torchtitan's cross_entropy_loss) | kept after forward (L) | peak through backward (L) |\n"
              "|---|---:|---:|")
        for compiled in (False, True):
            kept, peak = loss_bytes(1024, 8192, compiled)
            print(f"| {'torch.compile' if compiled else 'eager'} | {kept:.2f} | {peak:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

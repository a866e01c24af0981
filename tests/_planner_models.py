"""Workloads for the planner tests: a GPT stack with the three recompute modes, from shapes.

Activation bytes per layer per microbatch (Korthikanti et al., 2022, "Reducing
Activation Recomputation in Large Transformer Models", §4): no recompute
``s·b·h·(34 + 5·a·s/h)``, selective ``34·s·b·h``, full ``2·s·b·h`` (the layer input).
Recompute adds the recomputed forward to the backward: all of it for full, the
attention core (``4·b·s²·h`` FLOPs) for selective.
"""

from __future__ import annotations

from pipeplan.hardware import Device, Link
from pipeplan.layers import LayerProfile, transformer_layer_flops
from pipeplan.planner import Cluster, Workload


def gpt_workload(
    *, num_layers: int = 8, hidden: int = 1024, heads: int = 16, seq: int = 1024,
    throughput: float = 4e14, micro_batch_sizes=(1, 2, 4), first_extra: float = 0.0,
    first_extra_bytes: float = 0.0,
) -> Workload:
    """A GPT decoder stack; times in ms."""
    profiles = {}
    for b in micro_batch_sizes:
        flops = transformer_layer_flops(hidden_size=hidden, seq_length=seq, micro_batch_size=b)
        forward = 1e3 * flops / throughput
        attention = 1e3 * 4.0 * b * seq * seq * hidden / throughput
        params = 12 * hidden * hidden + 13 * hidden
        acts = {
            "none": seq * b * hidden * (34 + 5 * heads * seq / hidden),
            "selective": 34.0 * seq * b * hidden,
            "full": 2.0 * seq * b * hidden,
        }
        extra = {"none": 0.0, "selective": attention, "full": forward}
        for mode, act in acts.items():
            profiles[(b, mode)] = LayerProfile(
                [forward] * num_layers, [2 * forward + extra[mode]] * num_layers, [forward] * num_layers,
                activation_bytes=[act] * num_layers, params=[params] * num_layers,
                send_bytes=[2.0 * seq * b * hidden] * num_layers,
                first_extra=first_extra * b, first_extra_bytes=first_extra_bytes,
            )
    return Workload.from_profiles(
        profiles,
        flops_per_sample=3 * num_layers * transformer_layer_flops(hidden_size=hidden, seq_length=seq,
                                                                 micro_batch_size=1),
        tokens_per_sample=seq,
        name="gpt",
    )


def make_cluster(gpus: int = 4, memory: float = 4e9, *, gpus_per_node: int = 2) -> Cluster:
    """A made-up GPU (989 TFLOP/s, ``memory`` bytes), NVLink-like inside a node, IB-like between."""
    device = Device("test-gpu", memory_bytes=memory, peak_flops=989e12)
    return Cluster(gpus, device, Link("nvlink", latency_ms=0.002, bandwidth=4.5e11),
                   Link("ib", latency_ms=0.005, bandwidth=5e10), gpus_per_node)


def tiny_spec_workload() -> tuple[Workload, Cluster]:
    """A small GPT from a spec (embedding, 8 blocks, head) on 8 H100s: the spec-built workload, priced by the cost model."""
    from pipeplan import hardware
    from pipeplan.models.modules import Embedding, LMHead, TransformerStack
    from pipeplan.models.spec import ModelSpec

    spec = ModelSpec("tiny", (
        Embedding(name="embed", vocab_size=4096, hidden_size=1024, tokens=256),
        TransformerStack(name="llm", num_layers=8, hidden_size=1024, num_heads=8, seq_length=256,
                         ffn_hidden_size=4096),
        LMHead(name="head", vocab_size=4096, hidden_size=1024, tokens=256),
    ))
    cluster = Cluster.of("h100-80g", 8)
    return Workload.from_spec(spec, hardware.device("h100-80g"), tp_link=cluster.intra_node), cluster

"""Cutting a model's layers into pipeline stages, and stages into chunks per rank.

    from pipeplan.partition import partition_layers, place_chunks
    partition_layers([30, 2, 2, 2, 2, 2, 2, 20], 4).layers_per_stage   # exact min-max stages
    place_chunks([40.0] + [2.0] * 30, num_ranks=4, chunks_per_rank=2).placement

Modules: :mod:`.problem` (the min-max instance and its feasibility test),
:mod:`.tiebreak` and :mod:`.ties` (exact tie-breaks among optimal partitions), :mod:`.memory` (per-rank
memory), :mod:`.steptime` (:func:`simulate_partition`, the one way to simulate a
partition, and the step-time refinement), :mod:`.solver`
(:func:`partition_layers`: time, memory per stage or per rank, step-time
refinement), :mod:`.placement` (several chunks per rank), :mod:`.choice` (the
``--partition auto|even|a,b`` choice of the CLI and the runtime). Torch-free.
"""

from __future__ import annotations

from .placement import ChunkPlacement, Pattern, fixed_pattern, place_chunks
from .solver import (
    Objective,
    PartitionOptions,
    PartitionResult,
    TieBreak,
    even_split,
    inflight_per_stage,
    partition_layers,
    rank_totals,
)
from .steptime import partition_schedule, simulate_partition

__all__ = [
    "ChunkPlacement",
    "Objective",
    "PartitionOptions",
    "PartitionResult",
    "Pattern",
    "TieBreak",
    "even_split",
    "fixed_pattern",
    "inflight_per_stage",
    "partition_layers",
    "partition_schedule",
    "place_chunks",
    "rank_totals",
    "simulate_partition",
]

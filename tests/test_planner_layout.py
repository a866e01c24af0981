"""The planner's layouts (planner/layout.py): why a configuration does not fit, from the partitioner's fields."""

from __future__ import annotations

from pipeplan.hardware import Device, Link
from pipeplan.layers import LayerProfile
from pipeplan.planner import Cluster, Config, Rejection, Workload
from pipeplan.planner.evaluate import Evaluator


def _lumpy_interleaved() -> tuple[Workload, Cluster, Config]:
    """24 layers of 16 static bytes and 100 activation bytes, interleaved over 4 ranks × 2 chunks, m = 8.

    C(23, 7) > 200 000 partitions: too many to list, so the partitioner searches
    for a capacity per rank and names one "found to fit".
    """
    profile = LayerProfile([1.0] * 24, activation_bytes=[100.0] * 24, params=[1.0] * 24)
    free = Link("free", latency_ms=0.0, bandwidth=1e30)
    cluster = Cluster(4, Device("test-gpu", memory_bytes=1e12, peak_flops=1e15), free, free)
    return Workload.from_profile(profile), cluster, Config(4, 1, 1, 8, "interleaved", 2)


def test_a_capacity_per_rank_found_to_fit_is_the_rejections_needed_bytes():
    workload, cluster, config = _lumpy_interleaved()
    evaluator = Evaluator(workload, cluster, 300.0, rank_capacity="exact")
    rejection = evaluator.layouts.partitioned(config)
    assert isinstance(rejection, Rejection)
    assert "found to fit is 2.02 KiB, needed by rank 0" in rejection.reason  # 2064 bytes
    assert rejection.needed_bytes == 2064.0 and not rejection.needed_proven


def test_a_stage_that_alone_needs_more_names_its_layers_and_bytes():
    workload, cluster, _ = _lumpy_interleaved()
    config = Config(4, 1, 1, 8, "1f1b", 1)  # one stage per rank: the partitioner names the stage
    evaluator = Evaluator(workload, cluster, 300.0)
    rejection = evaluator.layouts.partitioned(config)
    assert isinstance(rejection, Rejection)
    # 1F1B holds min(m, P − s) = 2 microbatches on stage 2: 6 layers × (16 + 2 × 100) bytes = 1296
    assert rejection.reason.startswith("stage 2 (layers 7..12) needs at least 1.27 KiB on its own; "
                                       "its largest module is 'layers.7'")
    assert rejection.needed_bytes == 1296.0 and rejection.needed_proven


def test_the_no_plan_message_says_when_its_memory_was_only_found_to_fit():
    from pipeplan.planner.advice import no_plan_fits

    _, _, config = _lumpy_interleaved()
    found = Rejection(config, "rank 0 ...", needed_bytes=2064.0, needed_proven=False)
    proven = Rejection(config, "stage 2 ...", needed_bytes=1296.0)
    workload, _, _ = _lumpy_interleaved()
    assert "the smallest memory found to fit is 2.02 KiB" in str(no_plan_fits([found], "300 B", workload, 300.0))
    assert "the smallest memory that fits is 1.27 KiB" in str(no_plan_fits([proven], "300 B", workload, 300.0))

"""The seed lessons' exercise APIs, kept with their original meaning.

    from pipeplan.lessons import AsymmetricPipelineScheduler      # also pipeplan.AsymmetricPipelineScheduler
    total, bubble = AsymmetricPipelineScheduler().simulate_1f1b_execution([30, 10, 10, 20], 8)
    # (280.0, 0.5): the lesson's forward-phase numbers

Modules: :mod:`.scheduler` (the heterogeneous 1F1B lesson's scheduler; torch-free)
and :mod:`.pipeline` (the single-process ``Pipeline``, ``PipelineStage`` and
``bubble_fraction`` exercise; needs torch, so it is not imported here).
"""

from __future__ import annotations

from .scheduler import AsymmetricPipelineScheduler

__all__ = ["AsymmetricPipelineScheduler"]

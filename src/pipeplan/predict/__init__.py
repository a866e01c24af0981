"""Predicting a measured step, and checking the prediction against the run.

    >>> import pipeplan
    >>> from pipeplan.layers import LayerProfile
    >>> from pipeplan.predict import compare, predict
    >>> schedule = pipeplan.build_schedule("1f1b", num_stages=2, num_microbatches=4)
    >>> timeline = predict(LayerProfile.uniform(10, forward=1.0), schedule, [6, 4])   # or LayerProfile.from_file
    >>> measured = pipeplan.simulate(schedule, pipeplan.StageCosts([6.5, 4.2]))    # stands in for a run's Timeline
    >>> print(compare(timeline, measured).report())
    makespan: predicted 78.000 ms, measured 84.100 ms, error -6.100 ms (-7.3%)
    per action: mean |start error| 2.281 ms, mean |duration error| 0.525 ms
    ...

Modules: :mod:`.prediction` (a profile's predicted step; per-kind calibration
factors), :mod:`.compare` (predicted against measured);
processes sharing cores are :func:`pipeplan.simulate`'s ``slowdown``. The machine calibration these read
(:class:`~pipeplan.calibration.Calibration`) is a value type of the core, since
profile files carry it. Torch-free.
"""

from __future__ import annotations

from .compare import Comparison, compare
from .prediction import costs_as_run, fit_kind_factors, predict, prediction_inputs, scale_profile

__all__ = [
    "Comparison",
    "compare",
    "costs_as_run",
    "fit_kind_factors",
    "predict",
    "prediction_inputs",
    "scale_profile",
]

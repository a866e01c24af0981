"""Predicting a measured step, and checking the prediction against the run.

    from pipeplan.predict import compare, predict
    timeline = predict(LayerProfile.from_file("prof.json"), schedule, [6, 4])   # ms
    print(compare(timeline, measured).report())

Modules: :mod:`.prediction` (a profile's predicted step; per-kind calibration
factors), :mod:`.contention` (processes sharing cores), :mod:`.compare`
(predicted against measured). The machine calibration these read
(:class:`~pipeplan.calibration.Calibration`) is a value type of the core, since
profile files carry it. Torch-free.
"""

from __future__ import annotations

from .compare import Comparison, compare
from .contention import simulate_shared
from .prediction import costs_as_run, fit_kind_factors, predict, prediction_inputs, scale_profile

__all__ = [
    "Comparison",
    "compare",
    "costs_as_run",
    "fit_kind_factors",
    "predict",
    "prediction_inputs",
    "scale_profile",
    "simulate_shared",
]

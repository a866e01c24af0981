"""The usage examples in the torch-free modules' docstrings run as doctests.

Each listed module's docstring shows at least one ``>>>`` example, and every
example in the module prints what it says (``ELLIPSIS``: ``...`` stands for
what depends on the machine or is left out; ``NORMALIZE_WHITESPACE``: long
outputs may wrap). The examples construct what they use and write no files.

Not listed: ``viz/plot.py`` and ``viz/compare_plot.py`` (they need matplotlib and
write an image: tests/test_viz_plot.py, test_viz_compare.py), ``viz/plans.py``
(its input is a planner search: tests/test_cli_plan.py).
"""

from __future__ import annotations

import doctest
import importlib

import pytest

MODULES = [
    "pipeplan",
    "pipeplan.costs",
    "pipeplan.simulate",
    "pipeplan.timeline",
    "pipeplan.analytic",
    "pipeplan.variation",
    "pipeplan.calibration",
    "pipeplan.limits",
    "pipeplan.errors",
    "pipeplan._validation",
    "pipeplan._files",
    "pipeplan.layers",
    "pipeplan.hardware",
    "pipeplan.hardware.links",
    "pipeplan.hardware.record",
    "pipeplan.hardware.registry",
    "pipeplan.hardware.roofline",
    "pipeplan.viz",
    "pipeplan.viz.gantt_text",
    "pipeplan.viz.steps",
    "pipeplan.viz.tables",
    "pipeplan.viz.trace",
    "pipeplan.presets",
    "pipeplan.predict",
    "pipeplan.predict.compare",
    "pipeplan.predict.prediction",
    "pipeplan.dualrate.metrics",
    "pipeplan.lessons.scheduler",
    "pipeplan.partition.problem",
    "pipeplan.partition.ties",
    "pipeplan.partition.schedule_compare",
    "pipeplan.profile_format",
    "pipeplan.dualrate.config",
    "pipeplan.models._schema",
    "pipeplan.models.schema_docs",
    "pipeplan.models.hf_config",
    "pipeplan.engines._names",
]

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


@pytest.mark.parametrize("name", MODULES)
def test_module_docstring_examples_run(name, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # an example that touches a path sees an empty directory
    module = importlib.import_module(name)
    assert ">>>" in (module.__doc__ or ""), f"{name}'s docstring has no >>> example"
    failed, attempted = doctest.testmod(module, optionflags=FLAGS, report=False)
    assert attempted >= 1
    assert failed == 0, f"{failed} of {attempted} examples in {name} failed (doctest's report is in the captured stdout)"

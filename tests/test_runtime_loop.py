"""The library workflow: profile once, run with the profile, compare with its prediction."""

from __future__ import annotations

from typing import Any

import pytest

torch = pytest.importorskip("torch")

import pipeplan.runtime.measure  # noqa: E402
from pipeplan.errors import InvalidInputError  # noqa: E402
from pipeplan.layers import LayerProfile  # noqa: E402
from pipeplan.partition import partition_layers  # noqa: E402
from pipeplan.runtime.loop import RunConfig, profile_model, run_pipeline  # noqa: E402

SMALL = {"layers": 2, "batch_size": 8, "microbatches": 4}


@pytest.fixture(scope="module")
def profile() -> LayerProfile:
    return profile_model(None, nproc=1, repeats=3, warmup=0, max_spread=None, **SMALL)


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_run_with_a_profile_measures_nothing_and_predicts_from_it(profile: LayerProfile,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("the run measured the layers although it was given a profile")

    monkeypatch.setattr(pipeplan.runtime.measure, "measure_layers", refuse)  # forked ranks inherit it
    report = run_pipeline(RunConfig(schedule="zb-h1", pp=2, steps=3, warmup=1, profile=profile, **SMALL))
    assert report["gradient_check"]["ok"], report["gradient_check"]
    assert report["config"]["layers_per_stage"] == list(partition_layers(profile, 2).layers_per_stage)
    assert report["config"]["profile"] == "given"
    predicted, measured = report["predicted_timeline"], report["timeline"]
    assert predicted.source == "simulated" and measured.source == "measured"
    assert report["prediction"]["predicted_makespan"] == predicted.makespan
    assert report["makespan_ms"]["median"] == measured.makespan  # odd count: the median step is shown
    assert report["makespan_ms"]["first_step"] > 0


def test_a_profile_of_another_model_is_refused_before_any_rank_starts(profile: LayerProfile) -> None:
    with pytest.raises(InvalidInputError, match=r"the profile has 4 layers, measured by pipeplan profile \(--model vla "
                                                r"--layers 2.*; the model this run builds \(--model vla --layers 3\) "
                                                r"has 5: .*or run the model it was measured on \(--model vla --layers 2\)"):
        run_pipeline(RunConfig(schedule="1f1b", pp=2, profile=profile, layers=3, batch_size=8, microbatches=4))

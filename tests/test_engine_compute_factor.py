"""An engine's kernels per device: torchtitan's eager factor on the layers' compute, fitted to its 8B rows only.

``Workload.with_compute_factor`` scales every layer's compute time and nothing else (the
tensor-parallel collectives, memory and FLOPs stay); ``plan --engine torchtitan`` applies
torchtitan's factor on the device it was fitted for (a100-80g) and nowhere else; the recorded
constant is what ``benchmarks/engine_fidelity.py --fit-torchtitan`` fits (the two Llama 3 8B
rows, never the held-out ones).
"""

from __future__ import annotations

import importlib.util
import json
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from pipeplan import engines, hardware
from pipeplan.engines.torchtitan import TORCHTITAN_EAGER_FACTORS
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.models.layer_costs import layer_profile
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.planner import Workload

ROOT = Path(__file__).resolve().parent.parent
A100 = hardware.device("a100-80g")


def gpt() -> ModelSpec:
    return ModelSpec("gpt", (
        Embedding(name="embedding", vocab_size=8192, hidden_size=1024, tokens=1024),
        TransformerStack(name="layers", num_layers=4, hidden_size=1024, num_heads=16, seq_length=1024,
                         ffn_hidden_size=4096, causal=True, final_norm=True),
        LMHead(name="head", vocab_size=8192, hidden_size=1024, tokens=1024),
    ))


def test_the_factor_scales_the_compute_and_nothing_else() -> None:
    base = Workload.from_spec(gpt(), A100)
    slow = base.with_compute_factor(1.5)
    a, b = base.profile(2, "none"), slow.profile(2, "none")
    for column in ("forward", "backward", "weight"):
        assert list(getattr(b, column)) == pytest.approx([1.5 * t for t in getattr(a, column)])
    assert list(b.activation_bytes) == list(a.activation_bytes) and list(b.params) == list(a.params)
    assert slow.flops_per_sample == base.flops_per_sample and slow.compute_factor == 1.5
    assert slow.with_compute_factor(1.0).profile(2, "none").forward == pytest.approx(list(a.forward))  # replaces


def test_tensor_parallel_collectives_are_not_scaled() -> None:
    """At tp 4 the forward is kernels + exposed collectives: doubling the factor adds the kernels once more."""
    at_tp = Workload.from_spec(gpt(), A100, tp_comm_overlap="off").with_tensor_parallel(4)
    plain, slow = at_tp.profile(2, "none"), at_tp.with_compute_factor(2.0).profile(2, "none")
    kernels = layer_profile(gpt(), A100, 2, recompute="none", tensor_parallel=4, sequence_parallel=True).forward
    comm = [p - k for p, k in zip(plain.forward, kernels)]
    assert max(comm) > 0  # the collectives are there
    assert [s - p for s, p in zip(slow.forward, plain.forward)] == pytest.approx(list(kernels))
    assert at_tp.with_compute_factor(2.0).tensor_parallel == 4


def test_a_measured_profile_takes_no_factor() -> None:
    work = Workload.from_profile(LayerProfile.uniform(4, forward=1.0, params=1e6, activation_bytes=1e6))
    assert work.with_compute_factor(1.0) is work
    with pytest.raises(InvalidInputError, match="measured profile"):
        work.with_compute_factor(1.3)
    with pytest.raises(InvalidInputError):
        Workload.from_spec(gpt(), A100).with_compute_factor(0.0)


def test_the_factor_is_torchtitans_on_the_device_it_was_fitted_for() -> None:
    torchtitan = engines.get("torchtitan")
    assert torchtitan.compute_factor("a100-80g") == TORCHTITAN_EAGER_FACTORS["a100-80g"] > 1.0
    assert torchtitan.compute_factor("h100-80g") == 1.0  # not fitted there: the device model's kernels
    assert engines.get("megatron").compute_factor("a100-80g") == 1.0


def test_the_constant_is_the_fit_to_the_8b_rows() -> None:
    """``--fit-torchtitan`` (the two Llama 3 8B rows only) gives the recorded constant to its 3 decimals."""
    path = ROOT / "benchmarks" / "engine_fidelity.py"
    sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location("benchmark_engine_fidelity_fit", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    fitting = [run for run in module.TORCHTITAN_RUNS if run[5]]
    assert [run[0] for run in fitting] == ["Llama 3 8B", "Llama 3 8B"]
    assert round(module.fit_torchtitan_factor(), 3) == TORCHTITAN_EAGER_FACTORS["a100-80g"]


def test_plan_applies_it_with_engine_torchtitan(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    spec = str(ROOT / "examples" / "gpt-6.2b.json")
    argv = ("plan", "--spec", spec, "--gpu", "a100-80g", "--gpus", "8", "--global-batch", "32", "--top", "1",
            "--tp", "1", "--pp", "1", "--dp-modes", "fsdp", "--recompute", "full", "--json")
    code, out, _ = run_cli(*argv, "--engine", "torchtitan")
    assert code == 0
    titan = json.loads(out)
    code, out, _ = run_cli(*argv)  # no --engine: Megatron-LM's knobs, the device model's kernels
    assert code == 0
    megatron = json.loads(out)
    factor = TORCHTITAN_EAGER_FACTORS["a100-80g"]
    ratio = titan["plans"][0]["pipeline_time"] / megatron["plans"][0]["pipeline_time"]
    assert ratio == pytest.approx(factor, rel=1e-6)
    assert f"x {factor:.3f}" in titan["assumptions"]["kernels"] and "kernels" not in megatron["assumptions"]

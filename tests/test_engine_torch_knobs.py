"""Plain torch's DDP knobs in the step model, on ``plan``, in the export and in ``check``: ``bucket_cap_mb`` and
``find_unused_parameters``.

Not given, they change nothing (the planner's ``--grad-sync`` prices the reduction, as before them);
``--bucket-cap-mb`` prices DDP's buckets, one all-reduce call and its latency per bucket, the last
bucket exposed; ``--find-unused-parameters on`` adds the graph walk's host time once per step on
each rank, summed over the pipeline ranks; both are written into ``split_spec.py`` as
``DDP_OPTIONS`` and read back; bad values are one line.
"""

from __future__ import annotations

import json
import math

import pytest

from pipeplan import engines, hardware
from pipeplan.engines.pipelining import DDP_BUCKET_CAP_MB, FIND_UNUSED_US, torch_files, torch_pricing
from pipeplan.errors import InvalidInputError
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.models.tensor_counts import layer_tensor_counts
from pipeplan.plan import Plan
from pipeplan.planner import Cluster, Workload
from pipeplan.planner.cluster import allreduce_ms
from pipeplan.planner.engine_costs import EngineCosts, autograd_nodes
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.space import Config
from pipeplan.planner.step import bucket_calls

H100 = hardware.device("h100-80g")
TORCH = engines.get("torch")


def gpt(layers: int = 8, hidden: int = 1024, seq: int = 512) -> ModelSpec:
    """A small GPT: embedding, ``layers`` blocks, a tied head."""
    return ModelSpec("gpt", (
        Embedding(name="embedding", vocab_size=8192, hidden_size=hidden, tokens=seq, position_tokens=seq),
        TransformerStack(name="layers", num_layers=layers, hidden_size=hidden, num_heads=16, seq_length=seq,
                         ffn_hidden_size=4 * hidden, bias=True, norm="layernorm", causal=True, final_norm=True),
        LMHead(name="head", vocab_size=8192, hidden_size=hidden, tokens=seq, tied_to="embedding"),
    ))


def _plan(knobs: dict[str, str] | None, *, sync: str = "megatron-overlap", pp: int = 1, dp: int = 8,
          spec: ModelSpec | None = None, mode: str = "ddp") -> Plan:
    spec = spec or gpt()
    work = Workload.from_spec(spec, H100)
    config = Config(pp, dp, 1, 4, "1f1b", 1, "none", 1, mode)
    layers = work.num_layers
    sizes = [layers // pp + (1 if s < layers % pp else 0) for s in range(pp)]
    costs = None if knobs is None else EngineCosts.of(TORCH, knobs)
    return evaluate_layout(work, Cluster.of("h100-80g", pp * dp), config, sizes, sync=sync, engine_costs=costs)


# ------------------------------------------------------------------------------------ the sources
def test_defaults_are_torchs_own():
    torch = pytest.importorskip("torch")
    from torch.nn.parallel import distributed

    assert DDP_BUCKET_CAP_MB == distributed._DEFAULT_BUCKET_CAP_MB == 25
    import inspect

    assert inspect.signature(torch.nn.parallel.DistributedDataParallel).parameters[
        "find_unused_parameters"].default is False
    assert TORCH.knobs.get("find-unused-parameters").default == "off"


def test_not_given_they_are_ddps_defaults():
    """torch.nn.parallel.DistributedDataParallel: bucket_cap_mb=25, find_unused_parameters=False."""
    assert torch_pricing({}) == torch_pricing({"bucket-cap-mb": "25", "find-unused-parameters": "off"})
    assert torch_pricing({"compile": "on"}) == torch_pricing({})
    assert _plan({}).step_time == _plan({"bucket-cap-mb": "25"}).step_time
    assert _plan({}).grad_sync == "torch-ddp"


# ------------------------------------------------------------------------------------ bucket_cap_mb
def test_bucket_cap_mb_prices_one_call_per_bucket():
    spec = gpt()
    given = _plan({"bucket-cap-mb": "25"}, spec=spec)
    preset = _plan(None, sync="torch-ddp", spec=spec)  # the planner's DDP sync: 25 MiB, one call's latency
    assert given.grad_sync == "torch-ddp"
    grads = Workload.from_spec(spec, H100).profile(1, "none").held_params()[1] * 2  # bf16 gradients
    calls = bucket_calls(grads, 25 * 2 ** 20)
    assert calls > 5
    link = Cluster.of("h100-80g", 8).data_parallel_link(1, 8)
    latency = allreduce_ms(link, 0.0, 8)
    assert latency > 0
    per_ms = 1e-3 / given.time_unit
    assert given.dp_comm_time - preset.dp_comm_time == pytest.approx((calls - 1) * latency * per_ms, rel=1e-9)
    # the last bucket stays exposed either way; the calls' latency hides behind the backward here
    assert given.step_time >= preset.step_time - 1e-9


def test_buckets_too_small_pay_latency_too_large_expose_their_last():
    tiny, mid, whole = (_plan({"bucket-cap-mb": mib}) for mib in ("1", "25", "1000"))
    assert tiny.grad_sync == "torch-ddp:bucket_cap_mb=1"
    assert tiny.dp_comm_time > mid.dp_comm_time > whole.dp_comm_time  # more calls, each paying the latency
    # a small model on a fast link: 1 MiB buckets' latencies outgrow the backward, one bucket hides nothing
    assert mid.dp_exposed_time < tiny.dp_exposed_time and mid.dp_exposed_time < whole.dp_exposed_time


def test_a_model_in_one_bucket_hides_nothing():
    whole = _plan({"bucket-cap-mb": "100000"})
    assert whole.dp_exposed_time == pytest.approx(whole.dp_comm_time, rel=1e-12)


def test_fsdp_is_not_ddp():
    assert _plan({"bucket-cap-mb": "5"}, mode="fsdp").step_time == _plan(None, mode="fsdp").step_time


# ------------------------------------------------------------------------------------ find_unused_parameters
@pytest.mark.parametrize("pp", [1, 2])
def test_find_unused_adds_each_ranks_walk(pp):
    spec = gpt()
    off, on = _plan({"find-unused-parameters": "off"}, pp=pp, spec=spec), _plan({"find-unused-parameters": "on"},
                                                                               pp=pp, spec=spec)
    per_tensor, per_node = FIND_UNUSED_US
    walk_ms = 1e-3 * sum(per_tensor * t + per_node * n
                         for t, n in zip(layer_tensor_counts(spec), autograd_nodes(spec)))
    per_ms = 1e-3 / on.time_unit
    # every layer is walked once per step, on the rank that holds it; the ranks' walks add on the drain
    assert on.dp_exposed_time - off.dp_exposed_time == pytest.approx(walk_ms * per_ms, rel=1e-9)
    assert on.step_time - off.step_time == pytest.approx(walk_ms * per_ms, rel=1e-9)
    assert on.pipeline_time == off.pipeline_time and on.grad_sync == off.grad_sync


def test_find_unused_grows_with_the_graph():
    small, large = gpt(layers=4), gpt(layers=16)
    extra = [_plan({"find-unused-parameters": "on"}, spec=s).step_time - _plan({}, spec=s).step_time
             for s in (small, large)]
    assert 0 < extra[0] < extra[1]


def test_find_unused_needs_data_parallelism():
    assert _plan({"find-unused-parameters": "on"}, dp=1).step_time == _plan({}, dp=1).step_time


def test_autograd_nodes_count_tensors_and_kernels():
    spec = gpt()
    nodes, tensors = autograd_nodes(spec), layer_tensor_counts(spec)
    assert all(n > t > 0 for n, t in zip(nodes[1:-1], tensors[1:-1]))  # a block: its kernels and its tensors


def test_the_benchmark_counts_nodes_as_autograd_has_them():
    torch = pytest.importorskip("torch")
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
    from ddp_find_unused import _model, count_nodes

    loss = _model(3, 2)(torch.ones(1, 8)).sum()
    # per layer: addmm, t (the weight's transpose), 2 tanh, 2 AccumulateGrad; then the sum
    assert count_nodes(loss) == 3 * 6 + 1


def test_the_constants_are_the_recorded_fit():
    import re
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    sys.path.insert(0, str(root / "benchmarks"))
    from _markers import read_between

    block = read_between(root / "docs" / "engines.md", "ddp-find-unused")
    tensor = re.search(r"\*\*([\d.]+) µs per parameter tensor\*\*", block)
    node = re.search(r"\*\*([\d.]+) µs per autograd node\*\*", block)
    assert tensor and node, block[-400:]
    assert FIND_UNUSED_US == (float(tensor[1]), float(node[1]))


# ------------------------------------------------------------------------------------ export and check
def _written(plan: Plan, knobs: dict[str, str]) -> str:
    files = {file.name: file.text for file in TORCH.export(plan, knobs=knobs)}
    return files["split_spec.py"]


def test_export_writes_ddp_options_and_reads_them_back(tmp_path):
    plan = _plan({"bucket-cap-mb": "50", "find-unused-parameters": "on"}, pp=2)
    text = _written(plan, {"bucket-cap-mb": "50", "find-unused-parameters": "on"})
    assert "DDP_OPTIONS = {'bucket_cap_mb': 50, 'find_unused_parameters': True}" in text
    for file in TORCH.export(plan, knobs={"bucket-cap-mb": "50", "find-unused-parameters": "on"}):
        (tmp_path / file.name).write_text(file.text)
    read = TORCH.read(tmp_path)
    assert read.value("bucket_cap_mb") == 50 and read.value("find_unused_parameters") == "on"
    assert "DDP_OPTIONS" in read.source_of("bucket_cap_mb")
    # not given: nothing written, torch's own defaults
    assert "DDP_OPTIONS" not in _written(plan, {})
    assert "DDP_OPTIONS" not in _written(_plan(None, mode="fsdp"), {"bucket-cap-mb": "50"})


def test_torchs_ddp_takes_the_written_options(tmp_path):
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    plan = _plan({"bucket-cap-mb": "5"}, pp=2)
    namespace: dict[str, object] = {"__file__": str(tmp_path / "split_spec.py")}
    exec(_written(plan, {"bucket-cap-mb": "5", "find-unused-parameters": "on"}), namespace)  # noqa: S102 - our file
    options = namespace["DDP_OPTIONS"]
    assert isinstance(options, dict)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 4), **options)
        assert ddp.bucket_bytes_cap == 5 * 2 ** 20 and ddp.find_unused_parameters is True
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("options, words", [
    ("{'bucket_cap_mb': -1}", "bucket_cap_mb must be a number of MiB > 0, got -1"),
    ("{'bucket_cap_mb': True}", "bucket_cap_mb must be a number of MiB > 0"),
    ("{'find_unused_parameters': 'yes'}", "find_unused_parameters must be True or False, got 'yes'"),
    ("[25]", "DDP_OPTIONS must be a dict"),
])
def test_bad_ddp_options_are_one_line(tmp_path, options, words):
    for file in torch_files(_plan(None, pp=2)):
        (tmp_path / file.name).write_text(file.text)
    spec = tmp_path / "split_spec.py"
    spec.write_text(spec.read_text() + f"DDP_OPTIONS = {options}\n")
    with pytest.raises(InvalidInputError, match="DDP_OPTIONS") as error:
        TORCH.read(tmp_path)
    assert words in str(error.value) and "\n" not in str(error.value)


def test_other_ddp_options_are_listed_not_priced(tmp_path):
    for file in torch_files(_plan(None, pp=2)):
        (tmp_path / file.name).write_text(file.text)
    spec = tmp_path / "split_spec.py"
    spec.write_text(spec.read_text() + "DDP_OPTIONS = {'gradient_as_bucket_view': True}\n")
    assert TORCH.read(tmp_path).ignored == ("DDP_OPTIONS gradient_as_bucket_view",)


def test_check_prices_the_export_as_plan_did(run_cli, tmp_path):
    argv = ["--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "32"]
    pins = ["--tp", "1", "--pp", "2", "--schedules", "1f1b", "--dp-modes", "ddp", "--micro-batch-size", "2",
            "--partition", "even", "--engine", "torch", "--bucket-cap-mb", "5", "--find-unused-parameters", "on"]
    status, text, err = run_cli("plan", *argv, *pins, "--export", "torch", "--json", "--top", "1")
    assert status == 0, err
    planned = json.loads(text)["export"]["plan"]
    assert planned["grad_sync"] == "torch-ddp:bucket_cap_mb=5"
    for name, content in planned["exports"]["torch"]["files"].items():
        (tmp_path / name).write_text(content)
    status, text, err = run_cli("check", "--torch-export", str(tmp_path), "--preset", "gpt-1.5b", "--gpus", "8",
                                "--global-batch", "32", "--top", "0", "--json")
    assert status == 0, err
    checked = json.loads(text)
    pinned = checked["config"]["pinned"]
    assert pinned["bucket_cap_mb"]["value"] == 5 and pinned["find_unused_parameters"]["value"] == "on"
    assert pinned["grad_sync"]["source"].startswith("torch bucket_cap_mb: split_spec.py: DDP_OPTIONS")
    step = planned["step_time"] * 1e3 * planned["time_unit_seconds"]
    if not checked["config"]["searched"]:
        assert checked["predicted"]["step_ms"] == pytest.approx(step, rel=1e-12)
    else:  # recompute is searched (plain torch has no --recompute): never slower than plan's pick
        assert checked["predicted"]["step_ms"] <= step * (1 + 1e-12)


# ------------------------------------------------------------------------------------------- CLI
PLAN = ("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--pp", "1", "--tp", "1",
        "--micro-batch-size", "2", "--dp-modes", "ddp", "--top", "1")


@pytest.mark.parametrize("argv, words", [
    (("--engine", "torch", "--bucket-cap-mb", "-1"), "--bucket-cap-mb for torch must be a number of MiB > 0, got '-1'"),
    (("--engine", "torch", "--bucket-cap-mb", "0"), "--bucket-cap-mb for torch must be a number of MiB > 0"),
    (("--engine", "torch", "--find-unused-parameters", "maybe"),
     "--find-unused-parameters for torch must be one of on, off, got 'maybe'"),
    (("--engine", "megatron", "--find-unused-parameters", "on"), "megatron has no knob --find-unused-parameters"),
    (("--engine", "deepspeed", "--bucket-cap-mb", "25"), "deepspeed has no knob --bucket-cap-mb"),
])
def test_cli_refuses_in_one_line(run_cli, argv, words):
    status, out, err = run_cli(*PLAN, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def test_cli_names_the_knobs(run_cli):
    status, out, err = run_cli(*PLAN, "--json", "--engine", "torch")
    assert status == 0, err
    assumed = json.loads(out)["assumptions"]
    assert assumed["bucket-cap-mb"].startswith("DDP's own 25 MiB")
    assert assumed["find-unused-parameters"].startswith("off (assumed")
    status, out, err = run_cli(*PLAN, "--json", "--engine", "torch", "--bucket-cap-mb", "10")
    assert status == 0, err
    given = json.loads(out)
    assert given["assumptions"]["bucket-cap-mb"] == "10 (given: --bucket-cap-mb)"
    assert given["plans"][0]["grad_sync"] == "torch-ddp:bucket_cap_mb=10"
    assert math.isfinite(given["plans"][0]["step_time"])

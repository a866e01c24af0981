"""pipeplan.check: a hand-built RunConfig pinned and priced, its open fields searched, the residual, scaling, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipeplan import engines
from pipeplan.check import TOLERANCE, check
from pipeplan.check.measured import format_time, residual
from pipeplan.check.pin import Filled, default_split, engine_default, pin
from pipeplan.engines import RunConfig, Setting
from pipeplan.errors import InvalidInputError
from pipeplan.models.spec import ModelSpec
from pipeplan.partition.solver import even_split
from pipeplan.planner.engine_costs import EngineCosts
from pipeplan.planner import Cluster, SearchOptions, Workload, search
from pipeplan.planner.baselines import megatron_split
from pipeplan.planner.evaluate import evaluate_layout
from pipeplan.planner.space import Config

SPEC = ModelSpec.from_file(Path(__file__).resolve().parent.parent / "examples" / "gpt-6.2b.json")


@pytest.fixture(scope="module")
def cluster() -> Cluster:
    return Cluster.of("h100-80g", 8)


@pytest.fixture(scope="module")
def workload(cluster: Cluster) -> Workload:
    return Workload.from_spec(SPEC, cluster.device, tp_link=cluster.intra_node)


def _config(engine: str = "megatron", **fields: object) -> RunConfig:
    return RunConfig(engine, "run.sh", {name: Setting(value, f"run.sh: {name} = {value}")
                                        for name, value in fields.items()})


FULL = dict(tp=2, pp=2, micro_batch_size=1, global_batch=64, schedule="1f1b", dp_mode="zero1",
            recompute="selective", sequence_parallel="on", tp_comm_overlap="backward", grad_sync="megatron")


def test_pinned_step_is_evaluate_layouts_for_the_same_config(workload: Workload, cluster: Cluster) -> None:
    result = check(_config(**FULL), workload, cluster, top=0)
    knobbed = workload.with_tensor_knobs(sequence_parallel=True, tp_comm_overlap="backward").with_recompute("selective")
    expected = evaluate_layout(knobbed, cluster, Config(2, 2, 1, 32, "1f1b", 1, "selective", 2, "zero1"),
                               megatron_split(workload.num_layers, 2), memory_capacity=cluster.memory_bytes,
                               sync="megatron")
    assert result.plan.step_time == expected.step_time
    assert result.pinned.searched == ()
    assert result.pinned.values["num_microbatches"].value == 32
    assert result.pinned.values["num_microbatches"].source.startswith("derived")
    assert result.pinned.values["tp"].source == "run.sh: tp = 2"
    assert result.plan.fits and result.plan.memory_capacity == cluster.memory_bytes


def test_knobs_change_the_step_as_given(workload: Workload, cluster: Cluster) -> None:
    base = check(_config(**FULL), workload, cluster, top=0).step_ms
    exposed = check(_config(**{**FULL, "tp_comm_overlap": "off"}), workload, cluster, top=0).step_ms
    full = check(_config(**{**FULL, "recompute": "full"}), workload, cluster, top=0).step_ms
    assert exposed > base and full > base


def test_given_split_is_used_and_a_wrong_one_refused(workload: Workload, cluster: Cluster) -> None:
    layers = workload.num_layers
    split = (layers // 2 - 2, layers - layers // 2 + 2)
    result = check(_config(**FULL, layers_per_stage=split), workload, cluster, top=0)
    assert result.plan.layers_per_stage == split
    with pytest.raises(InvalidInputError, match="layers per stage"):
        check(_config(**FULL, layers_per_stage=(1, 2)), workload, cluster, top=0)


def test_default_split_is_the_engines() -> None:
    assert default_split("megatron", 34, 4) == megatron_split(34, 4)
    assert default_split("deepspeed", 34, 4) == (9, 9, 8, 8)


def test_open_fields_are_searched_within_the_given_values(workload: Workload, cluster: Cluster) -> None:
    config = _config("deepspeed", micro_batch_size=2, dp_mode="zero2")
    result = check(config, workload, cluster, global_batch=64, top=0)
    searched = set(result.pinned.searched)
    assert {"tp", "pp", "schedule", "recompute", "layers_per_stage"} <= searched
    assert all(result.pinned.values[name].source == "searched" for name in searched)
    assert result.plan.micro_batch_size == 2 and result.plan.dp_mode == "zero2"
    costs = EngineCosts.of(engines.get("deepspeed"), {})  # DeepSpeed's gradient sync and hooks, as plan --engine
    expected = search(workload, cluster, 64, SearchOptions(micro_batch_size=2, dp_modes=("zero2",),
                                                           engine="deepspeed", top=1, engine_costs=costs)).best
    assert result.plan.step_time == expected.step_time
    assert result.pinned.values["global_batch"].source == "given: --global-batch"


@pytest.mark.parametrize(("fields", "global_batch", "words"), [
    (dict(FULL, global_batch=None), None, "give --global-batch"),
    (dict(FULL, num_microbatches=4), None, "is not micro batch 1 × 4 microbatches × dp 2"),
    (FULL, 128, "--global-batch 128 disagrees"),
    (dict(FULL, tp=8, pp=2), None, "does not divide 8 GPUs"),
    (dict(FULL, grad_sync="sometimes"), None, "gradient sync 'sometimes'"),
])
def test_contradictions_are_one_line(workload: Workload, cluster: Cluster, fields: dict[str, object],
                                     global_batch: int | None, words: str) -> None:
    config = _config(**{k: v for k, v in fields.items() if v is not None})
    with pytest.raises(InvalidInputError, match=words.replace("×", ".").replace("(", ".").replace(")", ".")) as error:
        pin(config, workload, cluster, global_batch=global_batch)
    assert "\n" not in str(error.value)


def test_batch_from_micro_batch_and_accumulation(workload: Workload, cluster: Cluster) -> None:
    pinned = pin(_config(**{**{k: v for k, v in FULL.items() if k != "global_batch"}, "num_microbatches": 8}),
                 workload, cluster)
    assert pinned.plan.global_batch == 1 * 8 * 2
    assert pinned.batch_held == "micro batch × microbatches"
    assert pin(_config(**FULL), workload, cluster).batch_held == "global batch"


def test_breakdown_adds_up_and_prices_tp_apart(workload: Workload, cluster: Cluster) -> None:
    result = check(_config(**FULL), workload, cluster, top=0)
    parts = result.breakdown
    assert parts.step_ms == pytest.approx(result.step_ms, rel=1e-9)
    assert all(value >= 0 for value in parts.parts().values())
    assert parts.tp_exposed_ms is not None and 0 < parts.tp_exposed_ms < parts.compute_ms
    no_tp = check(_config(**{**FULL, "tp": 1}), workload, cluster, top=0)
    assert no_tp.breakdown.tp_exposed_ms is None


def test_measured_residual_wording_and_sign() -> None:
    slow = residual(880.0, 2980.0)
    assert slow.verdict == "unexplained" and slow.unexplained_ms == pytest.approx(2100.0)
    assert slow.text.startswith("2.1 s of 2.98 s is not compute or communication: look at the data loader")
    fast = residual(1000.0, 500.0)
    assert fast.verdict == "pessimistic" and fast.unexplained_ms < 0
    assert "pessimistic for this run by 100%" in fast.text
    near = residual(1000.0, 1000.0 * (1 + TOLERANCE) * 0.99)
    assert near.verdict == "within"
    assert residual(1000.0, 1000.0 * (1 + TOLERANCE) * 1.01).verdict == "unexplained"
    assert format_time(850.0) == "850 ms" and format_time(2980.0) == "2.98 s"


def test_measured_step_in_check(workload: Workload, cluster: Cluster) -> None:
    result = check(_config(**FULL), workload, cluster, top=0, measured_step_s=3.0)
    assert result.measured is not None and result.measured.predicted_ms == pytest.approx(result.step_ms)
    assert result.measured.measured_ms == 3000.0
    with pytest.raises(InvalidInputError, match="measured step"):
        check(_config(**FULL), workload, cluster, top=0, measured_step_s=-1.0)


def test_scaling_with_the_global_batch_held(workload: Workload, cluster: Cluster) -> None:
    rows = check(_config(**FULL), workload, cluster, top=0, scaling_gpus=[8, 16, 32, 10, 12]).scaling
    planned = [row for row in rows if row.plan is not None]
    assert [row.gpus for row in planned] == [8, 16, 32]
    assert [row.plan.dp for row in planned] == [2, 4, 8]
    assert all(row.plan.global_batch == 64 for row in planned)
    assert [row.plan.num_microbatches for row in planned] == [32, 16, 8]
    rates = [row.samples_per_s for row in planned]
    assert rates == sorted(rates)  # more GPUs, more samples/s here
    efficiency = [row.efficiency for row in planned]
    assert efficiency[0] == 1.0 and efficiency == sorted(efficiency, reverse=True)
    assert planned[1].grows and planned[0].grows == ""
    assert rows[3].plan is None and "does not divide 10 GPUs" in rows[3].why
    assert rows[4].plan is None and "global batch 64 is no multiple of dp 3" in rows[4].why


def test_scaling_with_micro_batch_and_accumulation_held(workload: Workload, cluster: Cluster) -> None:
    fields = {**{k: v for k, v in FULL.items() if k != "global_batch"}, "num_microbatches": 8}
    rows = check(_config(**fields), workload, cluster, top=0, scaling_gpus=[8, 16]).scaling
    assert [row.plan.global_batch for row in rows if row.plan] == [16, 32]
    assert [row.plan.num_microbatches for row in rows if row.plan] == [8, 8]


def test_best_plans_same_engine_and_any(workload: Workload, cluster: Cluster) -> None:
    result = check(_config(**FULL), workload, cluster, top=2)
    assert result.same_engine and result.any_engine
    for row in result.same_engine:
        assert not engines.get("megatron").refusal(row.plan)
        assert row.files and row.speedup == pytest.approx(result.step_ms / row.plan.milliseconds(row.plan.step_time))
        assert row.changes[-1].startswith("step ")
    best = result.any_engine[0]
    assert best.plan.step_time <= result.same_engine[0].plan.step_time
    assert best.engines == tuple(name for name in engines.names() if not engines.get(name).refusal(best.plan))


def test_the_best_plan_checked_is_itself(workload: Workload, cluster: Cluster) -> None:
    best = search(workload, cluster, 64, SearchOptions(engine="megatron", top=1)).best
    fields = dict(tp=best.tp, pp=best.pp, micro_batch_size=best.micro_batch_size, global_batch=64,
                  schedule=best.schedule, virtual_stages=best.virtual_stages, dp_mode=best.dp_mode,
                  recompute=best.recompute[0], layers_per_stage=tuple(best.layers_per_stage),
                  grad_sync=best.grad_sync, sequence_parallel="on" if best.sequence_parallel else "off")
    assert len(set(best.recompute)) == 1
    result = check(_config(**fields), workload, cluster, top=1)
    assert result.plan.step_time == best.step_time
    assert result.same_engine[0].speedup == pytest.approx(1.0)
    assert len(result.same_engine[0].changes) == 1  # the step alone: nothing changes


def test_to_dict_names(workload: Workload, cluster: Cluster) -> None:
    result = check(_config(**FULL), workload, cluster, top=1, measured_step_s=2.0, scaling_gpus=[8, 16])
    out = json.loads(json.dumps(result.to_dict()))
    predicted = out["predicted"]
    for key in ("step_ms", "samples_per_s", "tokens_per_s_per_gpu", "mfu", "peak_memory_bytes", "breakdown"):
        assert key in predicted
    assert len(predicted["peak_memory_bytes"]) == 2
    assert set(predicted["breakdown"]) == {"compute_ms", "bubble_ms", "dp_exposed_ms", "optimizer_ms", "tp_exposed_ms"}
    assert predicted["tokens_per_s_per_gpu"] == pytest.approx(result.plan.tokens_per_second / 8)
    assert out["config"]["engine"] == "megatron" and out["config"]["settings"]["tp"]["value"] == 2
    assert out["config"]["pinned"]["dp"] == {"value": 2, "source": "derived: 8 GPUs / (tp 2 × pp 2)"}
    assert set(out["best"]) == {"same_engine", "any_engine"}
    assert out["best"]["same_engine"][0]["files"]
    assert out["measured"]["verdict"] in ("unexplained", "within", "pessimistic")
    assert out["measured"]["tolerance"] == out["error_band"]["worst"] > 0  # the band's worst error
    assert "h100-80g" in out["error_band"]["unchecked"]  # the checked runs are on A100s
    assert [row["gpus"] for row in out["scaling"]["rows"]] == [8, 16]
    bare = check(_config(**FULL), workload, cluster, top=0).to_dict()
    assert "measured" not in bare and "scaling" not in bare


def test_files_gpus_other_than_the_clusters_is_a_note(workload: Workload, cluster: Cluster) -> None:
    pinned = pin(_config(**FULL, gpus=16), workload, cluster)
    assert pinned.value("gpus") == 8 and any("not the 16" in note for note in pinned.notes)


def test_microbatches_of_another_gpu_count_are_derived_again(workload: Workload, cluster: Cluster) -> None:
    """A Megatron line's microbatches hold at its own world size; checked on 8 GPUs they follow the global batch."""
    pinned = pin(_config(**FULL, gpus=16, num_microbatches=16), workload, cluster)
    assert pinned.plan.num_microbatches == 32 and pinned.plan.global_batch == 64
    assert any("derived again" in note for note in pinned.notes)
    with pytest.raises(InvalidInputError, match="is not micro batch"):
        pin(_config(**FULL, gpus=8, num_microbatches=16), workload, cluster)


def test_what_is_not_priced_is_a_note(workload: Workload, cluster: Cluster) -> None:
    pinned = pin(_config(**FULL, precision="fp32", seq_length=17), workload, cluster)
    assert any(note.startswith("precision fp32 is priced as bf16") and "run.sh: precision = fp32" in note
               for note in pinned.notes)
    assert any(note.startswith("sequence length 17 is not the model's") for note in pinned.notes)
    assert not pin(_config(**FULL, precision="bf16"), workload, cluster).notes


@pytest.mark.parametrize("mode", ["op", "every:2"])
def test_torchtitans_recompute_modes_are_priced_as_given(workload: Workload, cluster: Cluster, mode: str) -> None:
    fields = {**FULL, "recompute": mode}
    result = check(_config("torchtitan", **fields), workload, cluster, top=0)
    assert result.plan.recompute == (mode, mode)
    expected = evaluate_layout(workload.with_recompute(mode), cluster,
                               Config(2, 2, 1, 32, "1f1b", 1, mode, 2, "zero1"), even_split(workload.num_layers, 2),
                               memory_capacity=cluster.memory_bytes, sync="megatron")
    assert result.plan.step_time == expected.step_time
    assert result.breakdown.tp_exposed_ms is not None and result.breakdown.tp_exposed_ms > 0


def _titan(**fields: object) -> RunConfig:
    settings = {name: Setting(value, f"x.toml: {name} = {value}") for name, value in fields.items()}
    settings["global_batch"] = Setting(8, "torchtitan default (x.toml does not set global_batch_size): -1, local "
                                          "batch × data-parallel degree")
    return RunConfig("torchtitan", "x.toml", settings)


def test_an_engines_default_global_batch_follows_dp(workload: Workload, cluster: Cluster) -> None:
    """torchtitan's global batch is its local batch × dp: more GPUs, a larger global batch."""
    config = _titan(tp=1, pp=1, micro_batch_size=1, gpus=8, dp_mode="fsdp", recompute="full")
    result = check(config, workload, cluster, top=0, scaling_gpus=[8, 16])
    assert result.pinned.batch_held == "micro batch × microbatches"
    assert [row.plan.global_batch for row in result.scaling if row.plan] == [8, 16]
    other = pin(config, workload, Cluster.of("h100-80g", 16))
    assert other.plan.global_batch == 16 and other.plan.num_microbatches == 1
    given = pin(config, workload, cluster, global_batch=64)  # --global-batch over the engine's default
    assert given.plan.global_batch == 64 and given.plan.num_microbatches == 8
    assert engine_default(Filled(1, "Megatron-LM default (train.sh does not set --x)"))
    assert not engine_default(Filled(1, "train.sh: --micro-batch-size 1"))


def test_the_scaling_rows_price_the_engine_as_the_check_does(workload: Workload, cluster: Cluster) -> None:
    """The first scaling row is the checked configuration itself: DeepSpeed's hooks and sync priced in both."""
    config = _config("deepspeed", tp=1, pp=1, micro_batch_size=1, global_batch=64, dp_mode="zero2",
                     recompute="none")  # ZeRO-2 without overlap_comm (DeepSpeed's default): exposed reduce-scatter
    result = check(config, workload, cluster, scaling_gpus=(cluster.num_gpus, 2 * cluster.num_gpus), top=0)
    first = result.to_dict()["scaling"]["rows"][0]
    assert first["step_ms"] == pytest.approx(result.to_dict()["predicted"]["step_ms"], rel=1e-12)


def test_the_tp_share_is_the_collectives_alone_whatever_the_kernels_cost(workload: Workload, cluster: Cluster) -> None:
    """With every TP collective exposed (``off``) its share of the step does not depend on the engine's kernel
    factor: the free-link step keeps the factor (review: it dropped it and counted the kernels' extra as TP)."""
    from pipeplan.check.breakdown import tp_exposed_ms

    exposed = []
    for factor in (1.0, 2.0):
        work = workload.with_tensor_knobs(tp_comm_overlap="off").with_compute_factor(factor)
        pinned = pin(_config(**FULL), work, cluster)
        exposed.append(tp_exposed_ms(pinned.plan, pinned.workload, cluster, pinned.sync, pinned.engine_costs))
    assert exposed[0] is not None and exposed[0] > 0
    assert exposed[1] == pytest.approx(exposed[0], rel=1e-6)

"""Megatron-LM's knobs in the step model and on ``plan``: each moves time or memory the right way.

Sequence parallelism off never holds less memory nor runs faster; TP overlap ``on`` is never
slower than ``backward``, which is never slower than ``off``; at ``tp = 1`` none of them
changes anything; a pinned recompute mode is the only one the planner uses; the CLI refuses
a bad value in one line and names every knob's value in its assumptions.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeplan import engines, hardware
from pipeplan.errors import InvalidInputError
from pipeplan.layers import LayerProfile
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.plan import MEGATRON_TP_COMM_OVERLAPS, RECOMPUTE_MODES, TP_COMM_OVERLAPS
from pipeplan.planner import Cluster, SearchOptions, Workload, search

H100 = hardware.device("h100-80g")


def gpt(layers: int = 4, hidden: int = 1024, heads: int = 16, seq: int = 512) -> ModelSpec:
    """A small GPT: embedding, ``layers`` blocks, a tied head."""
    return ModelSpec("gpt", (
        Embedding(name="embedding", vocab_size=8192, hidden_size=hidden, tokens=seq, position_tokens=seq),
        TransformerStack(name="layers", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq,
                         ffn_hidden_size=4 * hidden, bias=True, causal=True, final_norm=True, dropout=True),
        LMHead(name="head", vocab_size=8192, hidden_size=hidden, tokens=seq, tied_to="embedding"),
    ))


shapes = st.tuples(st.sampled_from([512, 1024, 2048]), st.sampled_from([1, 2, 4, 8]),
                   st.sampled_from([1, 2, 4]), st.sampled_from(RECOMPUTE_MODES))


def _profile(spec: ModelSpec, tp: int, size: int, mode: str, **knobs: object) -> LayerProfile:
    return Workload.from_spec(spec, H100, **knobs).with_tensor_parallel(tp).profile(size, mode)  # type: ignore[arg-type]


@settings(max_examples=25, deadline=None)
@given(shapes)
def test_sequence_parallel_off_never_uses_less_memory_nor_time(shape):
    hidden, tp, size, mode = shape
    spec = gpt(hidden=hidden)
    on = _profile(spec, tp, size, mode)
    off = _profile(spec, tp, size, mode, sequence_parallel=False)
    assert sum(off.activation_bytes) >= sum(on.activation_bytes)
    assert all(a >= b * (1 - 1e-12) for a, b in zip(off.forward, on.forward))
    assert all(a >= b * (1 - 1e-12) for a, b in zip(off.backward, on.backward))
    if tp == 1:
        assert off.activation_bytes == on.activation_bytes and off.forward == on.forward
    elif mode != "full":  # a block keeps its norms' inputs: whole instead of 1/tp
        assert sum(off.activation_bytes) > sum(on.activation_bytes)


@settings(max_examples=25, deadline=None)
@given(shapes, st.booleans())
def test_overlap_on_never_slower_than_backward_never_slower_than_off(shape, sequence_parallel):
    hidden, tp, size, mode = shape
    spec = gpt(hidden=hidden)
    profiles = {overlap: _profile(spec, tp, size, mode, sequence_parallel=sequence_parallel, tp_comm_overlap=overlap)
                for overlap in TP_COMM_OVERLAPS}
    for field in ("forward", "backward"):
        on, backward, off = (getattr(profiles[o], field) for o in ("on", "backward", "off"))
        assert all(a <= b + 1e-12 and b <= c + 1e-12 for a, b, c in zip(on, backward, off))
    assert profiles["on"].activation_bytes == profiles["off"].activation_bytes  # overlap is time only
    if tp == 1:
        assert profiles["on"].forward == profiles["off"].forward
        assert profiles["on"].backward == profiles["off"].backward
    else:  # the forward's collectives are exposed without --tp-comm-overlap, hidden with it
        assert sum(profiles["backward"].forward) > sum(profiles["on"].forward)
        assert sum(profiles["off"].backward) > sum(profiles["backward"].backward)


def test_defaults_are_todays_model():
    """The knobs' defaults price what the step model priced before them (golden outputs stay)."""
    spec = gpt()
    knobs = engines.get("megatron").knobs.defaults()
    # grad-reduce-dtype None: each data-parallel mode's own dtype, as before the knob (test_grad_reduce_dtype.py)
    assert knobs == {"recompute": None, "sequence-parallel": "on", "tp-comm-overlap": "backward",
                     "grad-reduce-dtype": None}
    plain = Workload.from_spec(spec, H100).with_tensor_parallel(4)
    pinned = Workload.from_spec(spec, H100, sequence_parallel=True, tp_comm_overlap="backward").with_tensor_parallel(4)
    for mode in RECOMPUTE_MODES:
        assert plain.profile(2, mode).forward == pinned.profile(2, mode).forward
        assert plain.profile(2, mode).backward == pinned.profile(2, mode).backward
    recompute = engines.get("megatron").knobs.get("recompute")
    assert recompute.choices == RECOMPUTE_MODES + ("block:N", "uniform:N")  # Megatron's --recompute-method
    assert recompute.searched == RECOMPUTE_MODES
    assert engines.get("megatron").knobs.get("tp-comm-overlap").choices == MEGATRON_TP_COMM_OVERLAPS


def test_with_tensor_knobs_keeps_degree_and_recompute():
    work = Workload.from_spec(gpt(), H100).with_tensor_parallel(2).with_recompute("selective")
    off = work.with_tensor_knobs(sequence_parallel=False, tp_comm_overlap="off")
    assert (off.tensor_parallel, off.recompute_modes, off.sequence_parallel, off.tp_comm_overlap) == (
        2, ("selective",), False, "off")
    direct = Workload.from_spec(gpt(), H100, sequence_parallel=False, tp_comm_overlap="off").with_tensor_parallel(2)
    assert off.profile(2, "selective").backward == direct.profile(2, "selective").backward


@pytest.mark.parametrize("mode", RECOMPUTE_MODES)
def test_pinned_recompute_is_the_only_mode_planned(mode):
    work = Workload.from_spec(gpt(layers=6), H100).with_recompute(mode)
    result = search(work, Cluster.of("h100-80g", 4), 16, SearchOptions(top=5))
    for plan in result.plans:
        assert set(plan.recompute) == {mode}
    free = search(Workload.from_spec(gpt(layers=6), H100), Cluster.of("h100-80g", 4), 16, SearchOptions(top=1))
    # a small model fits without recompute: the free search never recomputes, a pinned heavier mode costs time
    assert set(free.best.recompute) == {"none"}
    if mode != "none":
        assert result.best.step_time > free.best.step_time


def test_sequence_parallel_off_reaches_the_plan_and_its_export():
    work = Workload.from_spec(gpt(), H100, sequence_parallel=False)
    plan = search(work, Cluster.of("h100-80g", 4), 16, SearchOptions(tp=2, pp=1, top=1, dp_modes=("zero1",))).best
    assert plan.tp == 2 and not plan.sequence_parallel
    assert "--sequence-parallel" not in engines.export_plan(plan, "megatron")
    on = search(Workload.from_spec(gpt(), H100), Cluster.of("h100-80g", 4), 16, SearchOptions(tp=2, pp=1, top=1, dp_modes=("zero1",))).best
    assert on.sequence_parallel and "--sequence-parallel" in engines.export_plan(on, "megatron")


def test_measured_profile_refuses_what_it_cannot_answer():
    work = Workload.from_profile(LayerProfile.uniform(4, forward=1.0, params=1e6, activation_bytes=1e6))
    with pytest.raises(InvalidInputError, match="measured profile"):
        work.with_recompute("full")
    with pytest.raises(InvalidInputError, match="model spec"):
        work.with_tensor_knobs(sequence_parallel=False)
    assert work.with_recompute("none") is work
    assert work.with_tensor_knobs(sequence_parallel=True, tp_comm_overlap="backward") is work


# ------------------------------------------------------------------------------------------- CLI
PLAN = ("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--tp", "2", "--pp", "1",
        "--schedules", "1f1b", "--micro-batch-size", "2", "--dp-modes", "zero1")


@pytest.mark.parametrize("argv, words", [
    (("--tp-comm-overlap", "maybe"), "--tp-comm-overlap for megatron must be one of off, backward, on, got 'maybe'"),
    (("--sequence-parallel", "yes"), "--sequence-parallel for megatron must be one of on, off, got 'yes'"),
    (("--recompute", "op"), "--recompute for megatron must be one of none, selective, full, block:N, uniform:N, got 'op'"),
    (("--engine", "torch", "--recompute", "full"),
     "torch has no knob --recompute (its knobs: --compile, --bucket-cap-mb, --find-unused-parameters)"),
    (("--engine", "jax"), "engine must be one of megatron, deepspeed, torchtitan, torch, got 'jax'"),
    (("--sequence-parallel", "off", "--tp-comm-overlap", "on"), "--tp-comm-overlap on needs --sequence-parallel on"),
])
def test_cli_refuses_in_one_line(run_cli, argv, words):
    status, out, err = run_cli(*PLAN, *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def test_cli_profile_refuses_tensor_knobs(run_cli, tmp_path):
    path = tmp_path / "p.json"
    LayerProfile.uniform(4, forward=1.0, params=1e6, activation_bytes=1e6).to_file(str(path))
    status, _, err = run_cli("plan", "--profile", str(path), "--gpus", "2", "--global-batch", "8",
                             "--sequence-parallel", "off")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "model spec" in err


def test_cli_assumptions_carry_every_knob(run_cli):
    status, out, _ = run_cli(*PLAN, "--json")
    assert status == 0
    default = json.loads(out)
    assumed = default["assumptions"]
    assert assumed["engine"].startswith("megatron (assumed")
    assert assumed["recompute"].startswith("searched")
    assert assumed["sequence-parallel"].startswith("on (assumed")
    assert assumed["tp-comm-overlap"].startswith("backward (assumed")
    status, out, _ = run_cli(*PLAN, "--json", "--engine", "megatron", "--recompute", "full",
                             "--sequence-parallel", "off", "--tp-comm-overlap", "off")
    assert status == 0
    pinned = json.loads(out)
    assumed = pinned["assumptions"]
    assert assumed["engine"] == "megatron"
    assert assumed["recompute"] == "full (given: --recompute)"
    assert assumed["sequence-parallel"] == "off (given: --sequence-parallel)"
    assert assumed["tp-comm-overlap"] == "off (given: --tp-comm-overlap)"
    assert "without sequence parallelism" in assumed["tensor parallel"] and "all exposed" in assumed["tensor parallel"]
    best, base = pinned["plans"][0], default["plans"][0]
    assert set(best["recompute"]) == {"full"} and best["sequence_parallel"] is False
    assert best["step_time"] > base["step_time"]
    status, out, _ = run_cli(*PLAN, "--tp-comm-overlap", "on")
    assert status == 0 and "tp-comm-overlap on (given: --tp-comm-overlap)" in out


def test_sequence_parallel_off_is_no_claim_at_tp_1(run_cli):
    # model/simulate/partition refuse --sequence-parallel on at tp 1; "off" is no claim there, on every verb.
    status, _, err = run_cli(*PLAN, "--tp", "1", "--sequence-parallel", "off", "--top", "1")
    assert status == 0, err
    status, _, err = run_cli(*PLAN, "--tp", "1", "--sequence-parallel", "on", "--top", "1")
    assert status == 2 and "--sequence-parallel does not apply without --tp > 1" in err


def test_tp_comm_overlap_on_reaches_the_megatron_flags(run_cli, tmp_path):
    # The step is priced with the forward's collectives hidden: the export must ask Megatron-LM for that.
    argv = ("plan", "--spec", "examples/gpt-6.2b.json", "--gpus", "8", "--global-batch", "64", "--tp", "2",
            "--top", "1", "--export", "megatron")
    flags = {}
    for overlap in ("on", "backward"):
        out_dir = tmp_path / overlap
        status, _, err = run_cli(*argv, "--tp-comm-overlap", overlap, "--out", str(out_dir))
        assert status == 0, err
        flags[overlap] = "".join(path.read_text() for path in sorted(out_dir.iterdir()) if path.is_file())
    assert "--tp-comm-overlap" in flags["on"] and "--tp-comm-overlap" not in flags["backward"]

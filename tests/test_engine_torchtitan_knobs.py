"""torchtitan's activation checkpointing in the step model and on ``plan``: ``op`` and ``every:N``.

``every:N`` (full recompute of every Nth block, torchtitan's "selective layer") lies between
``none`` and ``full`` in time and memory and moves monotonically with N; ``op`` (torchtitan's
per-op policy: every other matmul's output and the attention's saved, the rest rerun) holds
less than ``none`` and more than ``full`` and costs backward time between them; ``plan
--engine torchtitan`` takes them, Megatron-LM refuses them in one line.
"""

from __future__ import annotations

import json

import pytest

from pipeplan import engines, hardware
from pipeplan.errors import InvalidInputError
from pipeplan.models.layer_costs import layer_costs
from pipeplan.models.modules import Embedding, LMHead, TransformerStack
from pipeplan.models.spec import ModelSpec
from pipeplan.plan import check_recompute, recompute_at
from pipeplan.planner import Workload

A100 = hardware.device("a100-80g")


def llama(layers: int = 8, hidden: int = 1024, heads: int = 16, kv: int = 4, seq: int = 1024,
          attention: str = "flash") -> ModelSpec:
    """A small Llama: gated MLP, RMSNorm, GQA, untied head."""
    return ModelSpec("llama", (
        Embedding(name="tok_embeddings", vocab_size=8192, hidden_size=hidden, tokens=seq),
        TransformerStack(name="layers", num_layers=layers, hidden_size=hidden, num_heads=heads, num_kv_heads=kv,
                         seq_length=seq, ffn_hidden_size=3584, gated_mlp=True, norm="rmsnorm", causal=True,
                         attention=attention, final_norm=True),
        LMHead(name="output", vocab_size=8192, hidden_size=hidden, tokens=seq),
    ))


def _totals(spec: ModelSpec, mode: str, size: int = 2) -> tuple[float, float]:
    """(activation bytes, backward ms) of the whole model under ``mode``."""
    profile = Workload.from_spec(spec, A100).with_recompute(mode).profile(size, mode)
    return sum(profile.activation_bytes), sum(profile.backward)


@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_every_n_lies_between_none_and_full_and_is_monotone_in_n(attention):
    spec = llama(attention=attention)
    none_bytes, none_time = _totals(spec, "none")
    full_bytes, full_time = _totals(spec, "full")
    previous = (full_bytes, full_time)
    for n in (2, 4, 8):  # larger N: fewer blocks recomputed (8 blocks: 4, 2, 1), more bytes, less time
        held, time = _totals(spec, f"every:{n}")
        assert full_bytes < held < none_bytes and none_time < time < full_time
        assert held > previous[0] and time < previous[1]
        previous = (held, time)
    assert _totals(spec, "every:3")[0] == _totals(spec, "every:4")[0]  # 2 blocks each: the same bytes
    every_1 = _totals(spec, "every:1")  # every block full; the embedding and head as none
    assert full_bytes <= every_1[0] < none_bytes and none_time < every_1[1] <= full_time
    assert _totals(spec, "every:9") == (none_bytes, none_time)  # 8 blocks: no 9th to checkpoint


def test_every_n_recomputes_exactly_the_nth_blocks():
    spec = llama(layers=6)
    none, full, every = (layer_costs(spec, 1, recompute=m) for m in ("none", "full", "every:3"))
    blocks = range(1, 7)  # layer 0 is the embedding, 7 the head
    for layer in blocks:
        expected = full if layer % 3 == 0 else none  # blocks 2 and 5 (0-based): (index + 1) % 3 == 0
        assert every[layer].activation_bytes == expected[layer].activation_bytes
        assert every[layer].input_grad_flops == expected[layer].input_grad_flops
    assert every[0] == none[0] and every[7] == none[7]
    assert [recompute_at("every:3", i) for i in range(6)] == ["none", "none", "full"] * 2


@pytest.mark.parametrize("attention", ["flash", "eager"])
def test_op_memory_and_time_lie_between_none_and_full(attention):
    spec = llama(attention=attention)
    none_bytes, none_time = _totals(spec, "none")
    full_bytes, full_time = _totals(spec, "full")
    op_bytes, op_time = _totals(spec, "op")
    assert full_bytes < op_bytes < none_bytes
    assert none_time < op_time < full_time


def test_op_saves_what_torchtitans_policy_saves():
    # per block: the input (h), wq (qd), wv (kvd), w1 (f) and w2 (h) outputs, the flash output (qd) and
    # its fp32 log-sum-exp per head; 2 bytes an element. wk, wo and w3 are rerun.
    h, heads, kv, seq, f, d = 1024, 16, 4, 1024, 3584, 64
    block = layer_costs(llama(), 1, recompute="op")[1]
    elements = seq * (h + heads * d + kv * d + f + h + heads * d)
    assert block.activation_bytes == pytest.approx(2 * elements + 4 * seq * heads)
    rerun = 2 * seq * (h * kv * d + heads * d * h + h * f)  # wk, wo, w3
    plain = layer_costs(llama(), 1, recompute="none")[1]
    assert block.input_grad_flops - plain.input_grad_flops == pytest.approx(rerun)


@pytest.mark.parametrize("mode", ["every:0", "every:x", "every", "op2", "layer"])
def test_bad_modes_are_refused(mode):
    with pytest.raises(InvalidInputError, match="every:N"):
        check_recompute(mode)


def test_torchtitan_knob_takes_its_modes_and_searches_none_op_full():
    knob = engines.get("torchtitan").knobs.get("recompute")
    for value in ("none", "op", "every:2", "every:12", "full"):
        assert knob.parse(value, "torchtitan") == value
    for value in ("selective", "every:N", "every:0"):
        with pytest.raises(InvalidInputError):
            knob.parse(value, "torchtitan")
    assert knob.default is None and knob.searched == ("none", "op", "full")
    assert engines.get("megatron").knobs.get("recompute").searched == ("none", "selective", "full")  # not block:N, uniform:N


# ------------------------------------------------------------------------------------------- CLI
PLAN = ("plan", "--preset", "gpt-1.5b", "--gpus", "8", "--global-batch", "64", "--pp", "1", "--tp", "1",
        "--dp-modes", "fsdp", "--micro-batch-size", "8", "--top", "1", "--json")


def test_plan_engine_torchtitan_every_2_works(run_cli):
    status, out, err = run_cli(*PLAN, "--engine", "torchtitan", "--recompute", "every:2")
    assert status == 0, err
    payload = json.loads(out)
    assert set(payload["plans"][0]["recompute"]) == {"every:2"}
    assert payload["assumptions"]["recompute"] == "every:2 (given: --recompute)"
    status, out, _ = run_cli(*PLAN, "--engine", "torchtitan", "--recompute", "none")
    none = json.loads(out)["plans"][0]
    status, out, _ = run_cli(*PLAN, "--engine", "torchtitan", "--recompute", "full")
    full = json.loads(out)["plans"][0]
    every = payload["plans"][0]
    assert none["step_time"] < every["step_time"] < full["step_time"]


def test_plan_engine_torchtitan_searches_its_modes(run_cli):
    status, out, err = run_cli(*PLAN, "--engine", "torchtitan")
    assert status == 0, err
    assert json.loads(out)["assumptions"]["recompute"].startswith("searched: none, op, full")


def test_plan_engine_megatron_refuses_op_in_one_line(run_cli):
    status, out, err = run_cli(*PLAN, "--engine", "megatron", "--recompute", "op")
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1
    assert "--recompute for megatron must be one of none, selective, full, block:N, uniform:N, got 'op'" in err


def test_torchtitan_toml_writes_selective_layer_and_op():
    from dataclasses import replace

    from pipeplan.plan import as_plan
    for mode, option in (("every:2", '"2"'), ("op", '"op"')):
        plan = replace(as_plan([4]), recompute=(mode,))
        text = engines.export_plan(plan, "torchtitan-toml")
        assert 'mode = "selective"' in text and f"selective_ac_option = {option}" in text

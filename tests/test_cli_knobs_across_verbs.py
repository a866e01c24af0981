"""Issue 31 item 3: every verb that builds a model from shapes takes the engine's knobs, in one vocabulary.

``plan``, ``model``, ``simulate --preset/--spec`` and ``partition --preset/--spec`` take
``--engine``, ``--recompute`` (a mode, ``reference``, or a mode per module),
``--sequence-parallel on|off`` and ``--tp-comm-overlap off|backward|on``, refuse the same
bad value with the same line, price the knobs the same way (``Workload.from_spec``) and
state each one's value under ``assumptions``. ``plan --virtual-stages N`` pins ``v``.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable

import pytest

from pipeplan import engines, hardware, presets
from pipeplan.cli import build_parser
from pipeplan.planner import Workload

RunCli = Callable[..., tuple[int, str, str]]
KNOBS = ("--engine", "--recompute", "--sequence-parallel", "--tp-comm-overlap")
#: the least each verb needs to reach its knobs, with pi0 (a VLA whose modules have reference recompute modes)
VERBS = {
    "model": ("model", "--preset", "pi0"),
    "simulate": ("simulate", "--preset", "pi0", "--stages", "2", "-m", "4"),
    "partition": ("partition", "--preset", "pi0", "--stages", "2"),
    "plan": ("plan", "--preset", "pi0", "--gpus", "8", "--global-batch", "64", "--top", "1"),
}
H100 = hardware.device("h100-80g")


def _verbs_with_preset() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    # check reads the engine and its knobs from the user's own files (--megatron-args, ...), not from flags
    return {name: verb for name, verb in sub.choices.items()
            if any("--preset" in action.option_strings for action in verb._actions)
            and not any("--megatron-args" in action.option_strings for action in verb._actions)}


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action | None:
    return next((action for action in parser._actions if flag in action.option_strings), None)


def test_every_verb_with_a_preset_takes_the_same_knob_flags() -> None:
    verbs = _verbs_with_preset()
    assert set(VERBS) <= set(verbs)  # the verbs this file runs are the ones that take --preset
    recompute = engines.get("megatron").knobs.get("recompute").choices
    seen: dict[str, set[tuple[object, ...]]] = {flag: set() for flag in KNOBS}
    for name, parser in verbs.items():
        for flag in KNOBS:
            action = _action(parser, flag)
            assert action is not None, f"{name} has no {flag}"
            assert action.nargs is None, f"{name} {flag} is a bare switch"  # every knob takes a value
            seen[flag].add((action.metavar, action.choices, action.default))
    for flag, shapes in seen.items():
        assert len(shapes) == 1, f"{flag} differs across verbs: {shapes}"
    metavar = next(iter(seen["--recompute"]))[0]
    assert isinstance(metavar, str) and metavar.split("|")[:len(recompute)] == list(recompute)
    assert "reference" in metavar.split("|")


@pytest.mark.parametrize("bad", [
    ("--recompute", "op"),
    ("--recompute", "vision"),
    ("--recompute", "vision=bogus"),
    ("--recompute", "nomodule=full"),
    ("--recompute", "vision=full,vision=none"),
    ("--sequence-parallel", "yes"),
    ("--tp-comm-overlap", "maybe"),
    ("--engine", "jax"),
    ("--engine", "torch", "--recompute", "full"),
    ("--engine", "megatron", "--overlap-comm", "on"),
    ("--engine", "deepspeed", "--overlap-comm", "maybe"),
    ("--tp", "2", "--sequence-parallel", "off", "--tp-comm-overlap", "on"),
    ("--tp", "1", "--sequence-parallel", "on"),
])
def test_the_same_bad_value_is_the_same_line_on_every_verb(run_cli: RunCli, bad: tuple[str, ...]) -> None:
    messages = {}
    for name, argv in VERBS.items():
        status, out, err = run_cli(*argv, *bad)
        lines = err.strip().splitlines()
        assert status == 2 and out == "" and len(lines) == 1, (name, err)
        prefix = f"pipeplan {name}: error: "
        assert lines[0].startswith(prefix), lines
        messages[name] = lines[0][len(prefix):]
    assert len(set(messages.values())) == 1, messages
    message = next(iter(messages.values()))
    assert any(flag in message for flag in bad if flag.startswith("--"))  # it names the flag


def test_the_knobs_are_refused_without_a_model_from_shapes(run_cli: RunCli) -> None:
    status, _, err = run_cli("simulate", "--forward", "1,2", "-m", "4", "--sequence-parallel", "off")
    assert status == 2 and "--sequence-parallel applies to a model from shapes" in err


def _layers(run_cli: RunCli, *argv: str) -> list[dict[str, float]]:
    status, out, err = run_cli("model", "--preset", "pi0", "--json", *argv)
    assert status == 0, err
    layers: list[dict[str, float]] = json.loads(out)["layers"]
    return layers


def test_model_prices_sequence_parallelism_as_plan_does(run_cli: RunCli) -> None:
    spec = presets.get("pi0")
    reference = {module.name: spec.training.mode_of(module.name) for module in spec.modules} if spec.training else "none"
    for sp, overlap in (("on", "backward"), ("off", "off"), ("on", "on")):
        mine = _layers(run_cli, "--tp", "2", "--sequence-parallel", sp, "--tp-comm-overlap", overlap)
        # what plan searches over: its workload at tp 2 with these knobs, the reference recompute pinned
        work = Workload.from_spec(spec, H100, sequence_parallel=sp == "on", tp_comm_overlap=overlap)  # type: ignore[arg-type]
        profile = work.with_tensor_parallel(2).with_recompute(reference).profile(1)
        assert [row["forward"] for row in mine] == pytest.approx(profile.forward)
        assert [row["backward"] for row in mine] == pytest.approx(profile.backward)
        assert [row["activation_bytes"] for row in mine] == pytest.approx(profile.activation_bytes)
    on = sum(row["activation_bytes"] for row in _layers(run_cli, "--tp", "2", "--sequence-parallel", "on"))
    off = sum(row["activation_bytes"] for row in _layers(run_cli, "--tp", "2", "--sequence-parallel", "off"))
    assert off > on  # the norms, dropouts and residuals held whole on both GPUs of the group


def test_tp_comm_overlap_changes_the_simulated_step(run_cli: RunCli) -> None:
    steps = {}
    for overlap in ("off", "backward", "on"):
        status, out, err = run_cli(*VERBS["simulate"], "--tp", "2", "--tp-comm-overlap", overlap, "--json")
        assert status == 0, err
        steps[overlap] = json.loads(out)["makespan"]
    assert steps["off"] > steps["backward"] >= steps["on"]


def test_model_and_simulate_state_the_knobs_as_plan_does(run_cli: RunCli) -> None:
    keys = ("engine", "recompute", "sequence-parallel", "tp-comm-overlap")
    assumed = {}
    for name in ("model", "simulate", "plan"):
        status, out, err = run_cli(*VERBS[name], "--json")
        assert status == 0, err
        assumed[name] = json.loads(out)["assumptions"]
        assert set(keys) <= set(assumed[name]), name
    for name in ("model", "simulate"):
        for key in ("engine", "sequence-parallel", "tp-comm-overlap"):
            assert assumed[name][key] == assumed["plan"][key]
        assert assumed[name]["recompute"].startswith("reference: ")  # not searched: the spec's own recipe
    assert assumed["plan"]["recompute"].startswith("searched")
    status, out, _ = run_cli(*VERBS["model"], "--json", "--engine", "megatron", "--recompute", "vision=full",
                             "--sequence-parallel", "off")
    given = json.loads(out)["assumptions"]
    assert given["engine"] == "megatron" and given["sequence-parallel"] == "off (given: --sequence-parallel)"
    assert given["recompute"].startswith("vision full, ") and given["recompute"].endswith("(given: --recompute)")


def test_recompute_per_module_reaches_each_modules_costs(run_cli: RunCli) -> None:
    mixed = _layers(run_cli, "--recompute", "vision=full,llm=selective")
    full = _layers(run_cli, "--recompute", "full")
    selective = _layers(run_cli, "--recompute", "selective")
    none = _layers(run_cli, "--recompute", "none")
    checked = set()
    for row, all_full, all_selective, all_none in zip(mixed, full, selective, none):
        module = str(row["name"]).split(".")[0]
        want = {"vision": all_full, "llm": all_selective}.get(module, all_none)
        if "+" in module:  # pi0's joint llm + action_expert layer: llm selective, action_expert none
            assert all_none["backward"] <= row["backward"] <= all_selective["backward"]
            continue
        assert row == want, module
        checked.add(module)
    assert "vision" in checked and len(checked) > 1
    assert full != mixed != none


def test_plan_pins_recompute_per_module(run_cli: RunCli) -> None:
    status, out, err = run_cli(*VERBS["plan"], "--json", "--recompute", "vision=full,action_expert=selective")
    assert status == 0, err
    payload = json.loads(out)
    by_module = payload["plans"][0]["recompute_by_module"]
    assert by_module["vision"] == "full" and by_module["action_expert"] == "selective" and by_module["llm"] == "none"
    assert payload["assumptions"]["recompute"].endswith("(given: --recompute)")
    status, out, _ = run_cli(*VERBS["plan"], "--json", "--recompute", "none")
    assert json.loads(out)["plans"][0]["step_time"] < payload["plans"][0]["step_time"]  # recompute costs time


def test_recompute_reference_is_the_spec_recipe_on_plan_too(run_cli: RunCli) -> None:
    spec = presets.get("pi0")
    assert spec.training is not None
    status, out, err = run_cli(*VERBS["plan"], "--json", "--recompute", "reference")
    assert status == 0, err
    by_module = json.loads(out)["plans"][0]["recompute_by_module"]
    assert by_module and all(mode == spec.training.mode_of(name) for name, mode in by_module.items())


def test_per_module_recompute_with_a_measured_profile_is_one_line(run_cli: RunCli, tmp_path) -> None:
    from pipeplan.layers import LayerProfile

    path = tmp_path / "p.json"
    LayerProfile.uniform(4, forward=1.0, params=1e6, activation_bytes=1e6).to_file(str(path))
    status, _, err = run_cli("plan", "--profile", str(path), "--gpus", "2", "--global-batch", "8",
                             "--recompute", "vision=full")
    assert status == 2 and len(err.strip().splitlines()) == 1 and "a mode per module needs a model spec" in err


def test_virtual_stages_pins_v(run_cli: RunCli) -> None:
    for v in (2, 3):
        status, out, err = run_cli(*VERBS["plan"], "--top", "5", "--virtual-stages", str(v), "--json")
        assert status == 0, err
        payload = json.loads(out)
        plans = payload["plans"]
        assert plans and all(plan["virtual_stages"] == v and plan["pp"] > 1 for plan in plans)
        assert payload["assumptions"]["virtual stages"] == f"{v} (given: --virtual-stages)"
    # past --max-virtual-stages: the pin is not capped by it
    status, out, err = run_cli(*VERBS["plan"], "--virtual-stages", "5", "--max-virtual-stages", "2", "--json")
    assert status == 0, err
    assert {plan["virtual_stages"] for plan in json.loads(out)["plans"]} == {5}


@pytest.mark.parametrize("argv, words", [
    (("--virtual-stages", "3", "--schedules", "1f1b,zb-v"), "virtual stages v=3 (--virtual-stages): no schedule searched runs 3 stages"),
    (("--virtual-stages", "2", "--pp", "1"), "virtual stages v=2 (--virtual-stages) need a pipeline"),
    (("--virtual-stages", "0"), "--virtual-stages"),
    (("--virtual-stages", "40"), "virtual stages v=40 (--virtual-stages) need pp·v ≤"),
])
def test_virtual_stages_a_schedule_does_not_take_is_one_line(run_cli: RunCli, argv: tuple[str, ...],
                                                             words: str) -> None:
    status, out, err = run_cli(*VERBS["plan"], *argv)
    assert status == 2 and out == ""
    assert len(err.strip().splitlines()) == 1 and words in err


def test_a_per_module_pin_survives_the_tensor_knobs_and_the_degree() -> None:
    spec = presets.get("pi0")
    pinned = Workload.from_spec(spec, H100).with_recompute({"vision": "full", "llm": "selective"})
    assert pinned.recompute_modes == ("full",)  # every stage labelled with the heaviest
    changed = pinned.with_tensor_parallel(2).with_tensor_knobs(sequence_parallel=False, tp_comm_overlap="off")
    assert changed.recompute_by_module == pinned.recompute_by_module
    direct = Workload.from_spec(spec, H100, sequence_parallel=False, tp_comm_overlap="off").with_tensor_parallel(2)
    want = direct.with_recompute({"vision": "full", "llm": "selective"}).profile(1)
    assert changed.profile(1).backward == want.backward
    assert changed.profile(1).backward != direct.with_recompute("full").profile(1).backward

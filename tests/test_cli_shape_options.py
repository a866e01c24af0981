"""The preset shape options (``--cameras``, ``--text-tokens``, ``--action-horizon``, ``--image-size``) in every verb (issue 36).

Every verb whose parser takes ``--preset`` (read from argparse, so a new one is covered) must
take every shape option of every preset and build the very model ``pipeplan model`` builds with
the same options; an option the preset lacks or a size out of range is one line, exit 2, with
the same message in every verb. ``plan`` says in its assumptions and ``--json`` which shape it
planned.

    python -m pytest -q tests/test_cli_shape_options.py
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from pipeplan import presets
from pipeplan.cli import build_parser
from pipeplan.models.spec import ModelSpec

#: A valid command of each verb that takes ``--preset`` (after ``--preset NAME``), small and fast.
VERB_ARGS: dict[str, list[str]] = {
    "model": [],
    "simulate": ["--stages", "2"],
    "partition": ["--stages", "2"],
    "plan": ["--gpus", "2", "--global-batch", "4"],
    "check": ["--deepspeed-config", str(Path(__file__).parent / "data" / "check" / "ds_config.json"), "--gpus", "2", "--top", "0"],
}


def preset_verbs() -> list[str]:
    """The verbs whose parser has ``--preset``."""
    parser = build_parser()
    sub = next(action for action in parser._actions if isinstance(action, argparse._SubParsersAction))
    return sorted({name for name, verb in sub.choices.items()
                   if any("--preset" in action.option_strings for action in verb._actions)})


def _other_value(option: str, default: int) -> int:
    """A valid value of ``option`` other than the preset's ``default``."""
    return {"image_size": 2 * default, "cameras": 1 if default != 1 else 2}.get(option, default + 8)


PAIRS = [(name, option) for name in presets.names() for option in presets.options(name)]


class _Planned(BaseException):
    """plan's (check's) model is built: stop before the search (the model is what this test compares)."""


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ModelSpec]]:
    """The models :func:`pipeplan.presets.get` builds during one call, in order; plan stops before its search."""
    made: list[ModelSpec] = []
    original = presets.get

    def recording(name: str, **overrides: int) -> ModelSpec:
        spec = original(name, **overrides)
        made.append(spec)
        return spec

    def stop(*args: Any, **kwargs: Any) -> None:
        raise _Planned()

    monkeypatch.setattr(presets, "get", recording)
    monkeypatch.setattr("pipeplan.cli.plan_cmd.search", stop)
    monkeypatch.setattr("pipeplan.cli.check_cmd.check", stop)
    yield made


def _call(run_cli: Callable[..., tuple[int, str, str]], *argv: str) -> tuple[int, str, str]:
    try:
        return run_cli(*argv)
    except _Planned:
        return 0, "", ""


def test_every_preset_verb_has_a_command() -> None:
    assert set(VERB_ARGS) == set(preset_verbs())


@pytest.mark.parametrize(("name", "option"), PAIRS, ids=[f"{n} {o}" for n, o in PAIRS])
def test_every_verb_builds_the_model_that_model_builds(name: str, option: str, built: list[ModelSpec],
                                                       run_cli: Callable[..., tuple[int, str, str]]) -> None:
    flag = "--" + option.replace("_", "-")
    value = str(_other_value(option, presets.options(name)[option]))
    status, _, err = _call(run_cli, "model", "--preset", name, flag, value)
    assert status == 0, err
    expected = built[-1]
    assert expected != presets.get(name), f"{flag} {value} changed nothing in {name}: the test could not fail"
    for verb in preset_verbs():
        if verb == "model":
            continue
        built.clear()
        status, _, err = _call(run_cli, verb, "--preset", name, *VERB_ARGS[verb], flag, value)
        assert status == 0, f"pipeplan {verb} --preset {name} {flag} {value}: {err}"
        assert built and all(spec == expected for spec in built), f"{verb} built another model than model"


@pytest.mark.parametrize("verb", preset_verbs())
def test_refusals_are_one_line_and_the_same_in_every_verb(verb: str, run_cli: Callable[..., tuple[int, str, str]],
                                                          built: list[ModelSpec]) -> None:
    cases = [(["--preset", "gpt-1.5b", "--cameras", "2"], "preset 'gpt-1.5b' has no --cameras; its options: none"),
             (["--preset", "openvla-7b", "--action-horizon", "8"], "preset 'openvla-7b' has no --action-horizon"),
             (["--preset", "pi0", "--cameras", "0"], "--cameras of preset 'pi0' must be an integer in 1..64, got 0"),
             (["--preset", "pi0", "--image-size", str(presets.OPTION_LIMITS["image_size"] + 1)],
              "--image-size of preset 'pi0' must be an integer in 1..4096, got 4097"),
             (["--preset", "pi0", "--text-tokens", "x"], "--text-tokens: invalid int value: 'x'")]
    for argv, message in cases:
        status, out, err = _call(run_cli, verb, *argv, *VERB_ARGS[verb])
        lines = err.strip().splitlines()
        assert status == 2 and len(lines) == 1, f"{verb} {argv}: {err}"
        assert lines[0].startswith(f"pipeplan {verb}: error: ") and message in lines[0], lines[0]
    assert not built or all(spec.name for spec in built)


def test_a_spec_or_profile_refuses_shape_options(run_cli: Callable[..., tuple[int, str, str]], tmp_path) -> None:
    profile = tmp_path / "p.csv"
    profile.write_text("name,forward\n" + "".join(f"l{i},1\n" for i in range(4)))
    status, _, err = run_cli("plan", "--profile", str(profile), "--gpus", "2", "--global-batch", "4", "--cameras", "2")
    assert status == 2 and "--cameras applies to --preset" in err and len(err.strip().splitlines()) == 1
    status, _, err = run_cli("plan", "--spec", "examples/model_spec.json", "--gpus", "2", "--global-batch", "4",
                             "--text-tokens", "9")
    assert status == 2 and "--text-tokens applies to --preset" in err


def test_plan_says_which_shape_it_planned(run_cli: Callable[..., tuple[int, str, str]]) -> None:
    argv = ["plan", "--preset", "pi0.5", "--gpus", "2", "--global-batch", "4", "--json"]
    status, out, err = run_cli(*argv, "--cameras", "1")
    assert status == 0, err
    shaped = json.loads(out)
    assert shaped["shape"] == {**presets.options("pi0.5"), "cameras": 1}
    assert "cameras 1 (given)" in shaped["assumptions"]["model shape"]
    status, out, err = run_cli(*argv)
    assert status == 0, err
    default = json.loads(out)
    assert default["shape"] == presets.options("pi0.5")
    assert "(given)" not in default["assumptions"]["model shape"]
    # one camera fewer of three: less vision work per example, so the best step is faster
    assert shaped["plans"][0]["step_time"] < default["plans"][0]["step_time"]
    status, out, _ = run_cli("plan", "--preset", "pi0.5", "--gpus", "2", "--global-batch", "4", "--cameras", "1")
    assert status == 0 and "model shape pi0.5: action_horizon 50, text_tokens 200, cameras 1 (given)" in " ".join(out.split())

"""The bubble figures ``simulate`` prints: one name each, said once what they are, the same names in --json."""

from __future__ import annotations

import json

import pipeplan
from pipeplan.viz.tables import BUBBLE_LEGEND


def test_simulate_names_each_bubble_figure_and_explains_both_once(run_cli, monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    status, out, err = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8")
    assert status == 0, err
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                                 pipeplan.StageCosts([30, 10, 10, 20]))
    ratio, span = f"{timeline.bubble_ratio:.1%}", f"{timeline.span_bubble_rate:.1%}"
    assert ratio != span  # two different figures: each must carry its own name
    assert f"bubble ratio {ratio}" in out.splitlines()[0]  # the headline: the same name as the table's
    assert f"span bubble rate {span}" in out
    assert " ".join(out.split()).count(" ".join(BUBBLE_LEGEND.split())) == 1  # once, wrapped to the terminal
    assert "bubble ratio:" in BUBBLE_LEGEND and "span bubble rate" in BUBBLE_LEGEND
    assert "bubble 44" not in out  # no unnamed bubble figure left


def test_json_uses_the_same_names(run_cli) -> None:
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--json")
    assert status == 0
    payload = json.loads(out)
    assert {"bubble_ratio", "span_bubble_rate"} <= set(payload)
    status, out, _ = run_cli("simulate", "--forward", "30,10,10,20", "-m", "8", "--schedules", "1f1b", "--json")
    assert status == 0
    assert "bubble_ratio" in json.loads(out)["rows"][0]

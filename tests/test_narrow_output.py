"""Issue 33 items 6, 7 and 1 (second half): narrow terminals, small memory, Ctrl-C, negative values,
``--model`` from the current directory, and the reference baseline's changed data-parallel mode.

At 80 columns the plan table cut every cell ("1×…", "hs…"); ``simulate``'s Gantt was 109 characters
whatever ``COLUMNS`` said; pp = 1 plans read schedule ``1f1b``. Now the table splits into tables of
fewer columns (no value cut or wrapped), the Gantt fits ``COLUMNS`` and pp = 1 shows ``—``.
"""

from __future__ import annotations

import contextlib
import io
import json
import re
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from _planner_models import gpt_workload, make_cluster
from pipeplan import units
from pipeplan.cli import main
from pipeplan.planner import SearchOptions, search
from pipeplan.planner.advice import baseline_notes
from pipeplan.viz.plans import NO_PIPELINE, PLAN_COLUMNS, plan_legend, plan_row, plan_table, split_note

BOX = "│┃╇┡┩━─┼├┤┏┓┗┛┳┻╋┃┠┨└┘┌┐┬┴"


def _render(renderable: object, width: int) -> list[str]:
    console = Console(width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.file.getvalue().splitlines()  # type: ignore[attr-defined]


def _cells(lines: list[str]) -> list[str]:
    """Every non-empty cell text of the rendered tables (one per physical line)."""
    cells = []
    for line in lines:
        if "│" not in line and "┃" not in line:
            continue
        cells += [cell.strip() for cell in re.split("[│┃]", line) if cell.strip()]
    return cells


@pytest.fixture(scope="module")
def result():
    workload, cluster = gpt_workload(num_layers=8, hidden=512, heads=8, seq=512, first_extra=25.0), make_cluster(8, 4e9)
    return search(workload, cluster, 32, SearchOptions(top=6))


@pytest.mark.parametrize("width", [60, 80, 100, 120, 200])
def test_the_plan_table_fits_the_width_with_every_value_whole(result, width):
    rows = [plan_row(str(i + 1), plan, result.ratio_to_best_baseline(plan)) for i, plan in enumerate(result.plans)]
    table = plan_table(result, width=width)
    lines = _render(table, width)
    assert all(len(line) <= width for line in lines), max(map(len, lines))
    cells = _cells(lines)
    assert not any(cell.endswith("…") for cell in cells)
    text = "\n".join(lines)
    for row in rows:  # every value of every ranked plan, on one line (not wrapped, not cut)
        for value in row[1:]:
            assert any(value in line for line in lines), (value, text)
    if width >= 80:  # narrower still, a header may fold inside a word (values never do)
        assert all(column.split()[-1] in text for column in PLAN_COLUMNS)  # every column's header is there
    parts = text.count("┏")
    assert (parts == 1) == (split_note(table) is None)


def test_a_wide_terminal_keeps_one_table_and_a_narrow_one_splits_it(result):
    assert split_note(plan_table(result, width=400)) is None
    narrow = plan_table(result, width=80)
    assert "split in" in (split_note(narrow) or "")
    assert split_note(plan_table(result)) is None  # no width: one table (benchmarks, library use)


def test_a_plan_without_a_pipeline_shows_no_schedule_in_the_table_but_json_keeps_it(result):
    flat = [plan for plan in [*result.plans, *(b.plan for b in result.baselines if b.plan)] if plan.pp == 1]
    piped = [plan for plan in [*result.plans, *result.one_knob.values()] if plan.pp > 1]
    assert flat and piped
    for plan in flat:
        assert plan_row("x", plan, None)[PLAN_COLUMNS.index("schedule")] == NO_PIPELINE
        assert plan.to_dict()["schedule"] == plan.schedule  # --json: unchanged
    for plan in piped:
        assert plan_row("x", plan, None)[PLAN_COLUMNS.index("schedule")] == plan.schedule_label
    assert any(line.startswith(f"schedule {NO_PIPELINE}: no pipeline") for line in plan_legend(result))


def _run(argv: list[str], monkeypatch, columns: int | None = None) -> tuple[int, str, str]:
    if columns is not None:
        monkeypatch.setenv("COLUMNS", str(columns))
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            status = main(argv)
        except SystemExit as exit_:  # argparse's own exit (a flag type's one line)
            status = int(exit_.code or 0)
    return status, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("columns", [60, 80, 120])
def test_simulate_gantt_fits_columns(columns, monkeypatch):
    status, out, _ = _run(["simulate", "--forward", "30,10,10,20", "-m", "8", "--schedule", "1f1b"], monkeypatch,
                          columns)
    assert status == 0
    chart = [line for line in out.splitlines() if line.startswith("rank ") and "|" in line]
    assert len(chart) == 4
    assert all(len(line) <= columns for line in out.splitlines()), max(map(len, out.splitlines()))
    assert max(map(len, chart)) >= min(columns - 3, len('rank 0 |') + 100 + 1)  # the room it has, 100 at most


def test_simulate_gantt_keeps_100_columns_when_wide_and_width_overrides(monkeypatch):
    _, out, _ = _run(["simulate", "--forward", "30,10,10,20", "-m", "8"], monkeypatch, 200)
    chart = [line for line in out.splitlines() if line.startswith("rank 0 |")]
    assert len(chart[0]) == len("rank 0 |") + 100 + 1
    _, out, _ = _run(["simulate", "--forward", "30,10,10,20", "-m", "8", "--width", "50"], monkeypatch, 60)
    chart = [line for line in out.splitlines() if line.startswith("rank 0 |")]
    assert len(chart[0]) == len("rank 0 |") + 50 + 1


@pytest.mark.parametrize("argv, flag", [
    (["simulate", "--forward", "-5,10", "-m", "4"], "--forward"),
    (["simulate", "--forward", "5,10", "--backward", "-3,2", "-m", "4"], "--backward"),
    (["simulate", "--forward", "1,1", "-m", "2", "--comm-bandwidth", "-5GB/s", "--boundary-bytes", "1MB"],
     "--comm-bandwidth"),
])
def test_a_negative_value_gets_the_flags_own_one_line(argv, flag, monkeypatch):
    status, _, err = _run(argv, monkeypatch)
    assert status == 2
    assert len(err.strip().splitlines()) == 1 and flag in err and "expected one argument" not in err


def test_ctrl_c_while_building_the_parser_is_one_line_and_130(monkeypatch):
    import pipeplan.cli as cli

    def interrupted() -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    status, out, err = _run(["plan", "--preset", "pi0"], monkeypatch)
    assert (status, out, err) == (130, "", "pipeplan: interrupted\n")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1.0, max_value=4e12), min_size=1, max_size=5))
def test_a_memory_column_has_one_unit_and_small_values_never_read_as_fractions_of_a_gib(values):
    cells = units.format_memory_column(values)
    unit = {cell.split()[-1] for cell in cells}
    if max(values) >= units.GIB:
        assert unit == {"GiB"}
    else:
        assert "GiB" not in unit and all(not cell.startswith("0.") for cell in cells)
        for cell, value in zip(cells, values):  # the number still says the size, to 3 figures
            number, suffix = cell.split()
            scale = {"B": 1, "KiB": 2**10, "MiB": 2**20}[suffix]
            assert float(number.replace(",", "")) * scale == pytest.approx(value, rel=5e-3)


def test_a_small_models_worst_gpu_reads_in_mib():
    workload = gpt_workload(num_layers=4, hidden=64, heads=4, seq=64)
    small = search(workload, make_cluster(4, 4e9), 8, SearchOptions(top=2))
    lines = _render(plan_table(small, width=200), 200)
    worst = [cell for cell in _cells(lines) if cell.endswith("iB") or cell.endswith(" B")]
    assert worst and all("GiB" not in cell for cell in worst)


def test_a_factory_in_the_current_directory_is_found_without_pythonpath(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from pipeplan.errors import InvalidInputError
    from pipeplan.models.loading import load_model

    (tmp_path / "narrow_usermod.py").write_text(textwrap.dedent("""
        import torch
        from torch import nn
        def factory():
            model = nn.Sequential(nn.Linear(4, 4), nn.Linear(4, 2))
            def make_batch(batch_size, seed=0):
                g = torch.Generator().manual_seed(seed)
                return torch.randn(batch_size, 4, generator=g), torch.randn(batch_size, 2, generator=g)
            return model, nn.functional.mse_loss, make_batch
        def wrong():
            return 1
    """))
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [entry for entry in sys.path if entry not in ("", str(tmp_path))])
    monkeypatch.delitem(sys.modules, "narrow_usermod", raising=False)
    model, loss_fn, make_batch = load_model("narrow_usermod:factory")
    assert len(model) == 2 and make_batch(3)[0].shape == (3, 4)
    with pytest.raises(InvalidInputError, match=r"factory\(\) -> \(model, loss_fn, make_batch\)"):
        load_model("narrow_usermod:wrong")


def test_a_reference_baseline_that_changed_mode_says_so_naming_both_and_the_memory(monkeypatch):
    import pipeplan.cli.plan_cmd as plan_cmd

    results = []

    def keep(*args, **kwargs):
        results.append(real(*args, **kwargs))
        return results[-1]

    real = plan_cmd.search
    monkeypatch.setattr(plan_cmd, "search", keep)
    for gpu in ("a100-40g", "a100-80g"):  # π0's openpi trains with DDP: 48 GiB does not fit 40 GB cards
        status, out, _ = _run(["plan", "--preset", "pi0", "--gpus", "4", "--gpu", gpu, "--global-batch", "64",
                               "--json", "--top", "1"], monkeypatch)
        assert status == 0
        reference = json.loads(out)["baselines"][0]
        notes = baseline_notes(results[-1].baselines)
        if reference["dp_mode"] == "ddp":
            assert gpu == "a100-80g" and notes == ()
        else:
            assert gpu == "a100-40g" and reference["dp_mode"] == "fsdp"
            (note,) = notes
            assert note.startswith("the reference baseline runs fsdp over every GPU, not its repository's ddp: "
                                   "ddp does not fit in memory")
            need = float(re.search(r"needs ([0-9.]+) GiB", note).group(1))  # type: ignore[union-attr]
            usable = float(re.search(r"over the ([0-9.]+) GiB", note).group(1))  # type: ignore[union-attr]
            assert need > usable
            assert note in results[-1].notes and note in json.loads(out)["notes"]  # under the table and in --json

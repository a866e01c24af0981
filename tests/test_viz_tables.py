"""Tests of pipeplan.viz.tables: the per-rank rich table."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from rich.console import Console
from rich.table import Table

import pipeplan
from pipeplan import CommModel, StageCosts, Timeline
from pipeplan.timeline import IdleCause
from pipeplan.viz import rank_table
from pipeplan.units import format_bytes
from pipeplan.viz.tables import format_time

from _builders import chunked_gpipe, simulated_timelines as timelines


def column(table: Table, header: str) -> list[str]:
    for col in table.columns:
        if col.header == header:
            return [str(cell) for cell in col.cells]
    raise KeyError(header)


def headers(table: Table) -> list[str]:
    return [str(col.header) for col in table.columns]


def test_gpipe_uniform_rows_and_caption() -> None:
    # GPipe, P = 4, m = 8, F = 1, B = 2: bubble = (P − 1)/(m + P − 1) = 3/11, and
    # every rank holds all m = 8 microbatches at its peak (DESIGN.md invariants).
    timeline = pipeplan.simulate(pipeplan.build_schedule("gpipe", num_stages=4, num_microbatches=8),
                                 StageCosts.uniform(4, forward=1, backward=2))
    table = rank_table(timeline)
    assert table.row_count == 5  # four ranks and the total
    assert column(table, "rank") == ["0", "1", "2", "3", "total"]
    assert column(table, "stages") == ["0", "1", "2", "3", "all"]
    assert column(table, "busy ms") == ["24", "24", "24", "24", "96"]
    assert column(table, "util %") == ["72.7"] * 5  # 24 / 33 = 1 − 3/11
    assert column(table, "peak in-flight") == ["8"] * 5
    assert column(table, "peak activations") == ["8 B"] * 5  # default: 1 byte per microbatch
    # Rank p starts after p forwards (fill p) and ends 2·p before rank 0 (drain: p backwards of 2).
    assert column(table, "idle fill ms") == ["0", "1", "2", "3", "6"]
    assert column(table, "idle drain ms") == ["0", "2", "4", "6", "12"]
    assert "idle blocked ms" not in headers(table) and "idle overhead ms" not in headers(table)
    assert table.caption == "makespan 33 ms · bubble ratio 27.3% · span bubble rate 27.3%"


def test_without_activation_sizes_no_bytes_are_claimed() -> None:
    # Issue 24 item 11: with no sizes given each microbatch counts 1, which is no memory figure.
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                                 StageCosts([30, 10, 10, 20]))
    table = rank_table(timeline, activation_sizes=False)
    assert "peak activations" not in headers(table)
    assert column(table, "peak in-flight") == ["4", "3", "2", "1", "4"]
    assert table.caption.endswith("· no activation sizes given")
    assert "peak activations" in headers(rank_table(timeline))


def test_only_non_zero_causes_get_columns() -> None:
    timeline = pipeplan.simulate(pipeplan.build_schedule("1f1b", num_stages=4, num_microbatches=8),
                                 StageCosts([30, 10, 10, 20], activation_bytes=[2**30] * 4),
                                 CommModel(latency=3, send_mode="rendezvous"))
    table = rank_table(timeline)
    idle = timeline.idle_by_cause()
    present = [c for c in IdleCause if any(per_rank[c] > 0 for per_rank in idle)]
    assert IdleCause.BLOCKED in present
    assert [h for h in headers(table) if h.startswith("idle ")] == [
        f"idle {c.value.replace('_', ' ')} ms" for c in present
    ]
    # 1F1B: stage p holds min(m, P − p) microbatches, here 1 GiB each.
    assert column(table, "peak in-flight")[:4] == ["4", "3", "2", "1"]
    assert column(table, "peak activations")[:4] == ["4 GiB", "3 GiB", "2 GiB", "1 GiB"]


def test_several_stages_per_rank_and_rendering() -> None:
    timeline = pipeplan.simulate(chunked_gpipe([0, 1, 1, 0], 3), StageCosts([1, 1, 1, 1]))
    table = rank_table(timeline)
    assert column(table, "stages")[:2] == ["0, 3", "1, 2"]
    console = Console(record=True, width=200)
    console.print(table)
    text = console.export_text()
    assert "chunked-gpipe (simulated): 4 stages on 2 ranks, 3 microbatches" in text
    assert "bubble ratio" in text and "span bubble rate" in text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0 B"), (4, "4 B"), (1023, "1,023 B"), (1536, "1.5 KiB"), (3 * 2**30, "3 GiB"), (2**60, "1,024 PiB")],
)
def test_format_bytes(value: float, text: str) -> None:
    assert format_bytes(value) == text


@pytest.mark.parametrize(("value", "text"), [(0, "0"), (12.3456, "12.35"), (789.0, "789"), (7890.4, "7,890")])
def test_format_time(value: float, text: str) -> None:
    assert format_time(value) == text


@settings(max_examples=30, deadline=None)
@given(timeline=timelines())
def test_rows_match_the_timeline(timeline: Timeline) -> None:
    table = rank_table(timeline)
    assert table.row_count == timeline.num_ranks + 1
    assert column(table, "busy ms") == [format_time(float(b)) for b in timeline.busy] + [
        format_time(float(timeline.busy.sum()))
    ]
    assert column(table, "util %")[:-1] == [f"{100 * u:.1f}" for u in timeline.utilisation]
    assert column(table, "peak in-flight") == [str(p) for p in timeline.peak_inflight] + [
        str(max(timeline.peak_inflight))
    ]
    idle = timeline.idle_by_cause()
    for cause in IdleCause:
        header = f"idle {cause.value.replace('_', ' ')} ms"
        if any(per_rank[cause] > 0 for per_rank in idle):
            assert column(table, header)[:-1] == [format_time(per_rank[cause]) for per_rank in idle]
        else:
            assert header not in headers(table)
    assert f"bubble ratio {timeline.bubble_ratio:.1%}" in str(table.caption)

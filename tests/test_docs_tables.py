"""Every table a benchmark writes into docs/ matches the current code, or says when and how it was measured.

The blocks between ``<!-- name:start -->`` and ``<!-- name:end -->`` (benchmarks/_markers.py) are
of two kinds:

* **computed** (simulator, planner, partitioner, cost model only): recomputed here with the current
  code; the docs text must equal it, and a failure names the page, the table and the command that
  rewrites it. Where a block also holds measured columns (CPU seconds) those cells are masked, and
  where a whole block costs minutes, named rows or sub-tables are checked (the line under the table
  says which; ``PIPEPLAN_DOCS_TABLES=all`` checks the rest too: 5 minutes each for the clusters and the
  schedule-quality corpus on a loaded 2-core machine);
* **measured** (CPU seconds, resident memory, multi-process runs): the values are not checked, but the
  block's last line must give the date, the machine and the exact command (``_markers.MEASURED``).

What each check costs on the shared 2-core machine (seconds, idle … loaded): cost-model 15 … 24 (its four
blocks at once), schedule-quality 9 … 16, schedule-table 8 … 9 (the issue's exact command, in a fresh
process), planner-clusters 3 … 6 (the smolvla rows), planner-walkthrough 2 … 4.5, preset-table,
partition-quality and planner-comm under 0.5 each, uneven-batches 3 … 6, engine-fidelity's Korthikanti rows about 3,
memory-fidelity about 1 (every row);
the measured blocks nothing: about 50 s in all.
"""

from __future__ import annotations

import difflib
import functools
import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
BENCHMARKS = ROOT / "benchmarks"
if str(BENCHMARKS) not in sys.path:
    sys.path.append(str(BENCHMARKS))  # the benchmarks import their helpers by name (_markers, schedule_corpus)

from _markers import MEASURED, mask_columns, read_between, signed  # noqa: E402

FULL = os.environ.get("PIPEPLAN_DOCS_TABLES") == "all"
needs_full = pytest.mark.skipif(not FULL, reason="minutes of search: set PIPEPLAN_DOCS_TABLES=all")


from _benchmarks import benchmark  # noqa: E402  (one module per benchmark, shared with the other tests)


@dataclass(frozen=True)
class Table:
    """One computed block of a docs page, the command that rewrites it, and how the test recomputes it."""

    doc: str
    name: str
    command: str
    #: the whole block, or the pieces of it that are checked (a table's header, then rows that must appear together)
    compute: Callable[[], str | list[str]]
    #: headers of measured columns: their cells are not compared
    masked: frozenset[str] = frozenset()

    @property
    def where(self) -> str:
        return f"{self.doc}, table '{self.name}'"

    def __str__(self) -> str:
        return f"{self.doc}:{self.name}"


def _schedule_table() -> str:
    # The exact command; what it prints is what --write records.
    done = subprocess.run([sys.executable, str(BENCHMARKS / "schedule_table.py")], capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=300, check=True)
    assert "-0.0%" not in done.stdout  # issue 24: a gap a hair under zero printed as -0.0%
    return done.stdout


@functools.cache
def _cost_model() -> dict[str, str]:
    from pipeplan import hardware

    return benchmark("cost_model").blocks(hardware.device("a100-80g"), hardware.link("nvlink-a100"))[0]


def _clusters(models: tuple[str, ...]) -> list[str]:
    planner = benchmark("planner")
    return [planner.clusters_table(planner.cluster_cases(models), processes=1 if models else 2)]


def _partition_quality() -> str:
    import numpy as np

    module = benchmark("partition_quality")
    rows, worst = module.quality_rows(np.random.default_rng(0), repeats=1)
    return "\n".join(module.quality_table(rows, worst))


def _torch_corpus_rows() -> list[str]:
    # the zero-bubble heuristic's rows need its checkout (--zb-checkout): torch's orders only
    lines = benchmark("schedule_quality").corpus_tables(None, 80, 80)
    header = next(index for index, line in enumerate(lines) if line.startswith("| peer, metric |"))
    return ["\n".join([*lines[header:header + 2], *(line for line in lines if line.startswith("| torch "))])]


COMPUTED = [
    Table("schedules.md", "schedule-table", "python benchmarks/schedule_table.py --write", _schedule_table),
    Table("presets.md", "preset-table", "python benchmarks/preset_table.py --write",
          lambda: benchmark("preset_table").block()),
    Table("presets.md", "model-schema", "python benchmarks/model_schema.py --write",
          lambda: benchmark("model_schema").block()),
    Table("cost_model.md", "action-heads", "python benchmarks/action_heads.py --write",
          lambda: benchmark("action_heads").block()),
    Table("planner.md", "planner-comm", "python benchmarks/comm_model.py --write",
          lambda: benchmark("comm_model").block()),
    Table("planner.md", "planner-walkthrough", "python benchmarks/planner.py --only walkthrough --write",
          lambda: benchmark("planner").walkthrough_block()),
    *(Table("cost_model.md", name, "python benchmarks/cost_model.py --write",
            functools.partial(lambda name: _cost_model()[name], name))
      for name in ("cost-model-table-9", "cost-model-table-4", "cost-model-held-out", "cost-model-other")),
    Table("planner.md", "planner-clusters", "python benchmarks/planner.py --only clusters --write",
          lambda: _clusters(("smolvla",)), frozenset({"CPU s"})),
    Table("partition.md", "partition-quality", "python benchmarks/partition_quality.py --write",
          lambda: [_partition_quality()], frozenset({"pipeplan solve ms"})),
    Table("cost_model.md", "engine-fidelity", "python benchmarks/engine_fidelity.py --write",
          lambda: [benchmark("engine_fidelity").checked_piece()]),
    Table("engines.md", "engine-fidelity-deepspeed", "python benchmarks/engine_fidelity.py --write",
          lambda: benchmark("engine_fidelity").deepspeed_block()),
    Table("engines.md", "torchtitan-compile", "python benchmarks/torchtitan_compile.py --write",
          lambda: [benchmark("torchtitan_compile").block()]),
    Table("engines.md", "torchtitan-h100", "python benchmarks/torchtitan_h100.py --write",
          lambda: [benchmark("torchtitan_h100").block()]),
    Table("cost_model.md", "memory-fidelity", "python benchmarks/memory_fidelity.py --write",
          lambda: benchmark("memory_fidelity").block()),
    Table("schedules.md", "schedule-quality", "python benchmarks/schedule_quality.py --write --zb-checkout DIR",
          lambda: ["\n".join(benchmark("schedule_quality").paper_table()),
                   "\n".join(benchmark("schedule_quality").unequal_table())], frozenset({"seconds"})),
    Table("uneven_batches.md", "uneven-batches", "python benchmarks/uneven_batches.py --only simulated --write",
          lambda: benchmark("uneven_batches").simulated_block()),
]

#: The costly rest, with ``PIPEPLAN_DOCS_TABLES=all``.
FULL_CHECKS = [
    Table("cost_model.md", "engine-fidelity", "python benchmarks/engine_fidelity.py --write",
          lambda: benchmark("engine_fidelity").block()),
    Table("planner.md", "planner-clusters", "python benchmarks/planner.py --only clusters --write",
          lambda: _clusters(()), frozenset({"CPU s"})),
    Table("schedules.md", "schedule-quality", "python benchmarks/schedule_quality.py --write --zb-checkout DIR",
          lambda: ["\n".join(benchmark("schedule_quality").objective_table()), *_torch_corpus_rows()],
          frozenset({"adaptive CPU s per order", "peer CPU s per order"})),
]

#: (page, table, the script that writes it) of every measured block.
MEASURED_TABLES = [
    ("simulator.md", "simulate-speed", "simulate_speed.py"),
    ("simulator.md", "action-memory", "action_memory.py"),
    ("partition.md", "partition-speed", "partition_speed.py"),
    ("partition.md", "partition-quality", "partition_quality.py"),  # its solve ms and speed table
    ("planner.md", "planner-speed", "planner.py"),
    ("planner.md", "planner-clusters", "planner.py"),  # its CPU s
    ("schedules.md", "schedule-quality", "schedule_quality.py"),  # its seconds and speed table
    ("runtime_benchmark.md", "runtime-vs-torch", "runtime_vs_torch.py"),
    ("fidelity.md", "fidelity-table", "fidelity.py"),
    ("fidelity.md", "rebalance-table", "rebalance.py"),
    ("dual_rate.md", "dual-rate-results", "dual_rate.py"),
    ("cli.md", "first-hour", "first_hour.py"),
    ("uneven_batches.md", "uneven-speed", "uneven_batches.py"),
    ("uneven_batches.md", "uneven-cpu", "uneven_batches.py"),
    ("uneven_batches.md", "uneven-pipeline", "uneven_batches.py"),
    ("uneven_batches.md", "plan-mix-cost", "plan_mix.py"),
    ("engines.md", "deepspeed-hooks", "deepspeed_hooks.py"),
    ("engines.md", "ddp-find-unused", "ddp_find_unused.py"),
]


def _first_difference(docs: str, code: str) -> str:
    for line in difflib.unified_diff(docs.split("\n"), code.split("\n"), "docs", "code", n=0, lineterm=""):
        if line.startswith(("-", "+")) and not line.startswith(("---", "+++")):
            return line[:300]
    return "(whitespace)"


def _check(table: Table) -> None:
    docs = mask_columns(read_between(ROOT / "docs" / table.doc, table.name), table.masked)
    computed = table.compute()
    advice = f"rewrite it with `{table.command}`"
    if isinstance(computed, str):
        code = mask_columns(computed.strip("\n").rstrip(), table.masked)
        assert docs == code, (f"{table.where} differs from what the code computes now; {advice}. "
                              f"First difference: {_first_difference(docs, code)}")
        return
    lines = docs.split("\n")
    for piece in computed:
        # a piece is a table's header and some of its rows: the header must be in the block, the rows together
        header, _separator, *rows = mask_columns(piece, table.masked).split("\n")
        assert header in lines, f"{table.where}: no table headed {header!r}; {advice}"
        found = any(lines[i:i + len(rows)] == rows for i in range(len(lines) - len(rows) + 1))
        assert found, (f"{table.where}: these rows differ from what the code computes now; {advice}. "
                       f"Computed: {rows[-1][:200]!r} ... ({len(rows)} lines)")


@pytest.mark.parametrize("table", COMPUTED, ids=str)
def test_computed_table_matches_the_code(table: Table) -> None:
    _check(table)


@needs_full
@pytest.mark.timeout(1200)  # 5 minutes each on an idle 2-core machine
@pytest.mark.parametrize("table", FULL_CHECKS, ids=str)
def test_every_row_of_the_costly_tables_matches_the_code(table: Table) -> None:
    _check(table)


@pytest.mark.parametrize("doc, name, script", MEASURED_TABLES, ids=lambda v: str(v))
def test_measured_table_ends_with_its_date_machine_and_command(doc: str, name: str, script: str) -> None:
    last = read_between(ROOT / "docs" / doc, name).rsplit("\n", 1)[-1]
    match = MEASURED.match(last)
    assert match, (f"docs/{doc}, table '{name}': its last line must be `Measured DATE on MACHINE: "
                   f"`python benchmarks/{script} --write`.` (benchmarks/_markers.measured_line), got {last!r}")
    command = match.group(3)
    assert command.startswith(f"python benchmarks/{script} ") and "--write" in command.split(), (doc, name, command)


def test_every_block_in_the_docs_is_checked() -> None:
    # A new table between markers must be registered above, as computed or as measured.
    import re

    known = {(t.doc, t.name) for t in COMPUTED} | {(doc, name) for doc, name, _ in MEASURED_TABLES}
    found = set()
    for path in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for name in re.findall(r"<!-- ([a-z0-9-]+):start -->", path.read_text()):
            found.add((path.name, name))
        assert not re.search(r"<!-- [a-z0-9-]+:begin -->", path.read_text()), f"{path.name}: use :start markers"
    assert found == known, f"unregistered: {sorted(found - known)}; gone: {sorted(known - found)}"


def test_computed_blocks_end_with_the_command_that_rewrites_them() -> None:
    for table in COMPUTED:
        if table.masked:  # mixed blocks end with their measured line
            continue
        last = read_between(ROOT / "docs" / table.doc, table.name).rsplit("\n", 1)[-1]
        assert last == f"Computed by `{table.command}`; tests/test_docs_tables.py checks it against the code.", \
            (table.where, last)


def test_a_value_that_rounds_to_zero_never_prints_negative() -> None:
    # issue 24: the schedule table printed `-0.0%` for a makespan a hair under the bound
    assert signed(-1e-12, ".1f") == "0.0" and signed(-1e-12, "+.4f") == "+0.0000"
    assert signed(-4e-5, ".2%") == "0.00%" and signed(-0.05, ".1f") == "-0.1" and signed(0.04, "+.1f") == "+0.0"


def test_masking_hides_only_the_named_columns() -> None:
    text = "| a | CPU s |\n|---|---|\n| 1 | 2.5 |\n\n| CPU s | b |\n|---|---|\n| 3 | 4 |"
    assert mask_columns(text, frozenset({"CPU s"})) == ("| a | CPU s |\n|---|---|\n| 1 | … |\n\n"
                                                         "| CPU s | b |\n|---|---|\n| … | 4 |")

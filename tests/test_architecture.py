"""The import direction of docs/architecture.md, checked on the real import graph.

Layers, lowest first; a module may import its own layer and the layers below it,
never one above. Inside a layer, packages may use each other only one way (no
cycle between two top-level packages), and no module cycle exists anywhere.
Imports inside functions count: they are edges of the architecture all the same.
No module under src/ is longer than :data:`MAX_LINES` lines (small modules with one job).
"""

from __future__ import annotations

from pathlib import Path

import grimp
import pytest

#: The most lines a module under src/ may have (issue 30: no file over 600 lines).
MAX_LINES = 600
SRC = Path(__file__).resolve().parent.parent / "src"

#: Each layer as the top-level names of ``pipeplan`` it holds (a name covers its submodules).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_validation", "limits", "_files", "actions", "lowering", "schedule", "costs", "timeline",
     "calibration", "simulate", "_simulate_compiled", "analytic", "variation", "profile_format", "operations", "units"),  # the core
    ("schedules", "viz"),                                           # generators; views of a Timeline
    ("layers", "hardware", "models", "presets", "plan", "data_parallel",
     "partition", "batches"),                                       # what a model costs; how to cut it
    ("engines",),                                                   # what each engine runs; its files
    ("predict", "planner", "check", "runtime", "dualrate"),         # workflows
    ("lessons",),                                                   # the seeds' exercise APIs
    ("cli", "__main__"),                                            # verbs: parse, call, print
)

#: Modules that need torch; every other module must reach torch by no chain of imports.
TORCH_MODULES = ("pipeplan.runtime", "pipeplan.cli", "pipeplan.__main__", "pipeplan.dualrate.policy",
                 "pipeplan.dualrate.runtime", "pipeplan.dualrate.study", "pipeplan.dualrate.task",
                 "pipeplan.dualrate.costs", "pipeplan.dualrate.reference", "pipeplan.dualrate.synchronous",
                 "pipeplan.dualrate.training", "pipeplan.dualrate.worker",
                 "pipeplan.lessons.pipeline", "pipeplan.models.loading", "pipeplan.models.vla")


def _top(module: str) -> str:
    """``pipeplan.partition.solver`` -> ``partition``; the package root itself -> ``""``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _layer_of(module: str) -> int:
    name = _top(module)
    for index, layer in enumerate(LAYERS):
        if name in layer:
            return index
    raise AssertionError(f"{module} is in no layer of tests/test_architecture.py: add it to LAYERS")


def _internal_edges(graph: grimp.ImportGraph) -> list[tuple[str, str]]:
    """Every direct import between two pipeplan modules, the facade ``pipeplan/__init__`` left out."""
    edges = []
    for importer in sorted(graph.modules):
        if not importer.startswith("pipeplan.") and importer != "pipeplan":
            continue
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            if imported.startswith("pipeplan.") and importer != "pipeplan":
                edges.append((importer, imported))
    return edges


def upward_imports(graph: grimp.ImportGraph) -> list[str]:
    """Imports from a lower layer into a higher one, as ``importer -> imported`` lines."""
    return [f"{a} -> {b}" for a, b in _internal_edges(graph) if _layer_of(a) < _layer_of(b)]


def package_cycles(graph: grimp.ImportGraph) -> list[str]:
    """Pairs of top-level packages (or modules) that import each other, either way round."""
    uses: dict[str, set[str]] = {}
    for a, b in _internal_edges(graph):
        if _top(a) != _top(b):
            uses.setdefault(_top(a), set()).add(_top(b))
    return sorted(f"{a} <-> {b}" for a in uses for b in uses[a] if a < b and a in uses.get(b, set()))


def module_cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    successors: dict[str, list[str]] = {}
    for a, b in _internal_edges(graph):
        successors.setdefault(a, []).append(b)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for root in sorted(successors):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            node, child = work.pop()
            if child == 0:
                index[node] = low[node] = len(index)
                stack.append(node)
                on_stack.add(node)
            nexts = successors.get(node, [])
            if child < len(nexts):
                work.append((node, child + 1))
                target = nexts[child]
                if target not in index:
                    work.append((target, 0))
                elif target in on_stack:
                    low[node] = min(low[node], index[target])
                continue
            if low[node] == index[node]:
                group = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.append(member)
                    if member == node:
                        break
                if len(group) > 1:
                    groups.append(sorted(group))
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
    return groups


def torch_leaks(graph: grimp.ImportGraph) -> list[str]:
    """Torch-free modules with a chain of imports to torch, each with the chain."""
    leaks = []
    for module in sorted(graph.modules):
        if not module.startswith("pipeplan") or module.startswith(TORCH_MODULES):
            continue
        if graph.chain_exists(module, "torch"):
            leaks.append(" -> ".join(graph.find_shortest_chain(module, "torch") or ()))
    return leaks


def long_files(root: Path, limit: int = MAX_LINES) -> list[str]:
    """Every ``.py`` file under ``root`` with more than ``limit`` lines, as ``path: N lines`` (path from ``root``)."""
    long = []
    for path in sorted(root.rglob("*.py")):
        count = len(path.read_text(encoding="utf-8").splitlines())
        if count > limit:
            long.append(f"{path.relative_to(root).as_posix()}: {count} lines")
    return long


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    return grimp.build_graph("pipeplan", include_external_packages=True, cache_dir=None)


def test_no_module_imports_a_layer_above_it(graph):
    assert upward_imports(graph) == []


def test_no_import_cycle_between_modules_or_packages(graph):
    assert module_cycles(graph) == []
    assert package_cycles(graph) == []


def test_planning_and_simulation_stay_torch_free(graph):
    assert torch_leaks(graph) == []


def test_every_module_has_a_layer(graph):
    for module in graph.modules:
        if module.startswith("pipeplan."):
            _layer_of(module)  # raises for a module no layer names


def test_no_module_is_longer_than_the_limit():
    assert SRC.is_dir(), SRC
    offenders = long_files(SRC)
    assert not offenders, f"{len(offenders)} file(s) under src/ over {MAX_LINES} lines: " + "; ".join(offenders)


def test_the_length_check_names_every_long_file(tmp_path: Path):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "short.py").write_text("x = 1\n" * MAX_LINES)
    (tmp_path / "pkg" / "long.py").write_text("x = 1\n" * (MAX_LINES + 1))
    (tmp_path / "longer.py").write_text("x = 1\n" * (MAX_LINES + 50))
    assert long_files(tmp_path) == [f"longer.py: {MAX_LINES + 50} lines", f"pkg/long.py: {MAX_LINES + 1} lines"]


def test_the_checks_catch_planted_violations():
    # An upward import, a cycle and a torch import planted into a fresh copy of the real graph.
    planted = grimp.build_graph("pipeplan", include_external_packages=True, cache_dir=None)
    planted.add_import(importer="pipeplan.schedule", imported="pipeplan.planner.search")
    planted.add_import(importer="pipeplan.costs", imported="pipeplan.simulate")
    planted.add_import(importer="pipeplan.partition.solver", imported="pipeplan.runtime.executor")
    assert "pipeplan.schedule -> pipeplan.planner.search" in upward_imports(planted)
    assert any({"pipeplan.costs", "pipeplan.simulate"} <= set(group) for group in module_cycles(planted))
    assert any(line.startswith("pipeplan.partition.solver -> pipeplan.runtime.executor")
               for line in torch_leaks(planted))
    assert "planner <-> schedule" in package_cycles(planted)  # planner imports schedule; planted back

"""``benchmarks/<stem>.py`` loaded once per test session, shared by every test file that reads it.

One module object per benchmark, so what a benchmark caches (``cost_model.schedule_plans``) is
computed once for all the tests that ask::

    from _benchmarks import benchmark
    plans = benchmark("cost_model").schedule_plans("1.5b", 24, device, link)
"""

from __future__ import annotations

import functools
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


@functools.cache
def benchmark(stem: str) -> ModuleType:
    """``benchmarks/<stem>.py`` as the module ``benchmark_<stem>`` (loaded once)."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.append(str(BENCHMARKS))  # the benchmarks import their helpers by name (_markers, ...)
    spec = importlib.util.spec_from_file_location(f"benchmark_{stem}", BENCHMARKS / f"{stem}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module

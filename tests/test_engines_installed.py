"""CI installs the engines (the ``engines`` extra) and sets ``PIPEPLAN_REQUIRE_ENGINES=1``.

The engine tests skip where an engine is missing, so a developer without DeepSpeed, torchtitan or
Megatron-Core still runs the rest. Under CI a skip would hide an export the engine no longer
accepts: this test turns a missing engine into a failure there.
"""

from __future__ import annotations

import importlib
import os

import pytest

#: The modules the engine tests import: DeepSpeed, torchtitan (which needs triton to import) and
#: Megatron-Core. Their versions are pinned in pyproject.toml's ``engines`` extra.
ENGINE_MODULES = ("deepspeed", "torchtitan", "megatron.core")


@pytest.mark.skipif(os.environ.get("PIPEPLAN_REQUIRE_ENGINES") != "1",
                    reason="engines are optional outside CI (PIPEPLAN_REQUIRE_ENGINES=1 requires them)")
@pytest.mark.parametrize("module", ENGINE_MODULES)
def test_ci_has_every_engine_so_no_engine_test_skips(module: str) -> None:
    importlib.import_module(module)

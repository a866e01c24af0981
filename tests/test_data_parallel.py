"""Data-parallel modes: each record's bytes per parameter against docs/planner.md, and a new mode is one record."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pipeplan import data_parallel
from pipeplan.errors import InvalidInputError

ROOT = Path(__file__).resolve().parents[1]


def _row(mode: str, pipelined: bool, d: float) -> tuple[float, float, float]:
    """docs/planner.md's "Data-parallel modes" table: weights, gradients, state per trained parameter."""
    table = {
        ("ddp", False): (2, 2, 12),
        ("zero1", False): (2, 4, 12 / d),
        ("zero2", False): (2, 2 / d, 12 / d),
        ("fsdp", False): (4 / d, 4 / d, 8 / d),
        ("fsdp", True): (2 + 4 / d, 4, 12 / d),  # gradients accumulated unsharded in fp32 (planner/memory.py)
    }
    return table[(mode, pipelined)]


@pytest.mark.parametrize("d", [2, 4, 8, 64])
@pytest.mark.parametrize("name,pipelined", [("ddp", False), ("zero1", False), ("zero2", False), ("fsdp", False),
                                            ("fsdp", True), ("ddp", True), ("zero1", True), ("zero2", True)])
def test_bytes_per_parameter_are_the_documented_table(name, pipelined, d):
    held = data_parallel.get(name).bytes_per_param(d, pipelined=pipelined)
    expected = _row(name, pipelined and name == "fsdp", d)  # only FSDP changes behind a pipeline
    assert (held.weights, held.gradients, held.state) == pytest.approx(expected, rel=1e-15)


@pytest.mark.parametrize("pipelined", [False, True])
def test_hsdp_holds_as_fsdp_over_its_shards(pipelined):
    assert data_parallel.get("hsdp").bytes_per_param(4, pipelined=pipelined) == \
        data_parallel.get("fsdp").bytes_per_param(4, pipelined=pipelined)


def test_wire_bytes_follow_the_table():
    # ddp all-reduces bf16 gradients and gathers nothing; zero1 reduce-scatters fp32, zero2 bf16; both
    # all-gather bf16 weights; fsdp reduces fp32 and gathers bf16
    wire = {name: data_parallel.get(name).bytes_per_param(8)[3:] for name in data_parallel.names()}
    assert wire == {"ddp": (2, 0), "zero1": (4, 2), "zero2": (2, 2), "fsdp": (4, 2), "hsdp": (4, 2)}


def test_collectives_and_sharding_per_mode():
    get = data_parallel.get
    assert [get(n).reductions_per_step(6) for n in data_parallel.names()] == [1, 1, 6, 1, 1]  # ZeRO-2: per microbatch
    assert [n for n in data_parallel.names() if get(n).per_layer(1)] == ["fsdp", "hsdp"]
    assert not any(get(n).per_layer(4) for n in data_parallel.names())  # behind a pipeline: once a step
    assert [get(n).shard_degree(1, 1, 16, 8) for n in data_parallel.names()] == [1, 16, 16, 16, 8]
    assert get("hsdp").runs_as(1, 1, 8, 8) == "fsdp"  # one node: HSDP is FSDP
    assert get("zero2").runs_as(1, 4, 1, 8) == data_parallel.REPLICATED  # no data parallelism
    assert not get("hsdp").applies(1, 8, 4, 8) and get("hsdp").applies(1, 1, 16, 8)


def test_dp_modes_flag_accepts_names_and_refuses_the_rest():
    assert data_parallel.parse_modes("ddp, zero2") == ["ddp", "zero2"]
    with pytest.raises(InvalidInputError, match="zero3 is not a data-parallel mode; give some of ddp, zero1"):
        data_parallel.parse_modes("zero3")
    with pytest.raises(InvalidInputError, match="empty entry"):
        data_parallel.parse_modes("ddp,")
    with pytest.raises(InvalidInputError, match="dp_mode must be one of"):
        data_parallel.get("zero3")


_FAKE = '''        DataParallelMode("fake", "a test's mode: ZeRO-1's bytes, reduced every microbatch",
                         StateSplit(Share(2.0), Share(4.0), Share(0.0, 12.0), reduce=4.0, gather=2.0),
                         reduces_every_microbatch=True),
'''


def test_a_new_mode_is_one_record_in_the_registry(tmp_path):
    source = tmp_path / "src"
    shutil.copytree(ROOT / "src", source, ignore=shutil.ignore_patterns("__pycache__"))
    module = source / "pipeplan" / "data_parallel.py"
    text = module.read_text()
    anchor = "    )\n}\n"  # the end of the registry's records
    assert text.count(anchor) == 1
    module.write_text(text.replace(anchor, _FAKE + anchor))
    env = dict(os.environ, PYTHONPATH=str(source))
    done = subprocess.run([sys.executable, "-m", "pipeplan", "plan", "--preset", "gpt-1.5b", "--gpus", "8",
                           "--global-batch", "64", "--dp-modes", "fake", "--json"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert done.returncode == 0, done.stderr
    plans = json.loads(done.stdout)["plans"]
    assert plans and all(plan["dp_mode"] == ("fake" if plan["dp"] > 1 else "ddp") for plan in plans)
    sharded = [plan for plan in plans if plan["dp"] > 1]
    assert sharded and all(plan["fits"] and plan["step_time"] > 0 for plan in sharded)

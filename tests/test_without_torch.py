"""Planning and simulation work with numpy alone; the runtime says clearly that it needs torch."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

_BLOCK_TORCH = "import sys; sys.modules['torch'] = None\n"  # any `import torch` now raises ImportError


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", _BLOCK_TORCH + textwrap.dedent(code)],
                          capture_output=True, text=True, timeout=120)


def test_simulate_partition_and_views_without_torch():
    result = run_python("""
        import pipeplan
        from pipeplan.partition import PartitionOptions, partition_layers
        from pipeplan.viz import text_gantt
        from pipeplan.cli import main
        for name in pipeplan.SCHEDULES:
            stages = 8 if name in ("interleaved", "zb-v") else 4
            options = {"costs": pipeplan.StageCosts([1.0] * stages)} if name == "adaptive" else {}
            schedule = pipeplan.build_schedule(name, num_stages=stages, num_microbatches=8, **options)
            text_gantt(pipeplan.simulate(schedule, pipeplan.StageCosts([1.0] * stages)))
        assert partition_layers([2.0] * 32, 4, PartitionOptions(first_extra=16, last_extra=8)).layers_per_stage == (3, 11, 11, 7)
        assert main(["simulate", "--forward", "30,10,10,20", "--json"]) == 0
        assert main(["partition", "--layers", "32", "--layer-cost", "2", "--stages", "4", "--json"]) == 0
        assert main(["demo", "--story", "lesson16"]) == 0
        assert main(["presets", "--json"]) == 0
        assert main(["model", "--preset", "pi0", "--json"]) == 0
        assert main(["partition", "--preset", "gr00t-n1", "--stages", "4", "--json"]) == 0
        assert main(["plan", "--preset", "pi0", "--gpus", "4", "--global-batch", "16", "--pp", "2",
                     "--micro-batch-size", "2", "--schedules", "1f1b,zb-h1", "--export", "torchtitan"]) == 0
        import pipeplan.models.spec, pipeplan.presets, pipeplan.hardware, pipeplan.planner, pipeplan.engines
        import pipeplan.batches, pipeplan.batches.pipeline
        assert pipeplan.batches.balance([3.0, 1.0, 2.0, 2.0], 2).makespan == 4.0
        assert "torch" not in [m for m in sys.modules if sys.modules[m] is not None]
    """)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("argv", [["run", "--nproc", "2"], ["demo", "--story", "seed003"]])
def test_torch_verbs_without_torch_are_one_line(argv):
    result = run_python(f"""
        from pipeplan.cli import main
        raise SystemExit(main({argv!r}))
    """)
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "torch" in lines[0], result.stderr

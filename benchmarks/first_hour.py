"""A newcomer's first hour, timed: the README's walk and the commands issue 24 was filed with.

Runs each command as ``python -m pipeplan ...`` in one fresh directory holding a copy of
``examples/``, in order (later commands read files earlier ones wrote), and records its exit status, CPU seconds (the child
process's user + system time), wall seconds, bytes on stdout and its last line on stderr
(what it wrote, or its one-line error). ``--write`` puts the table in docs/cli.md
(``first-hour``); the walk's commands must exit 0, the refused ones 2, or the script fails.

    python benchmarks/first_hour.py            # print the table
    python benchmarks/first_hour.py --write    # record it in docs/cli.md
"""

from __future__ import annotations

import argparse
import os
import resource
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "cli.md"

#: (command, the exit status it must have, why it is here): the README's walk first, then issue 24's commands.
WALK: list[tuple[str, int, str]] = [
    ("pipeplan demo", 0, "the README's first command"),
    ("pipeplan presets", 0, "first hour"),
    ("pipeplan model --preset pi0 --micro-batch-size 4 --by-module", 0, "first hour"),
    ("pipeplan plan --preset pi0 --gpus 16 --global-batch 256", 0, "first hour"),
    ("pipeplan plan --preset pi0 --gpus 16 --global-batch 256 --memory 40GiB --pp 2 --export torchtitan "
     "--out pi0-titan", 0, "first hour"),
    ("pipeplan simulate --preset pi0 --stages 4 --partition auto --micro-batch-size 4 --schedule zb-h1", 0,
     "first hour"),
    ("pipeplan profile --model dumbbell --nproc 2 --out measured.json --statistic min", 0, "your own model"),
    ("pipeplan partition measured.json --stages 2", 0, "your own model"),
    ("pipeplan plan --profile measured.json --gpus 8 --global-batch 64 --memory 40GiB", 0, "item 1"),
    ("pipeplan run --profile measured.json --model dumbbell --nproc 2 --partition 1,9 --plot cmp.png", 0,
     "your own model"),
    ("pipeplan model --preset pi0 --out measured.json", 2, "item 7: would overwrite the measured profile"),
    ("pipeplan plan --preset pi0 --gpus 8 --global-batch 64 --memory 80", 2, "item 2"),
    ("pipeplan plan --preset openvla-7b --gpus 1 --global-batch 8", 2, "item 3"),
    ("pipeplan plan --preset pi0 --gpus 8 --global-batch 256 --plot plan.png", 0, "items 4, 5"),
    ("pipeplan simulate --forward 30,10,10,20 -m 100000 --json", 0, "item 5"),
    ("pipeplan partition --layers 1000 --layer-cost 3 --stages 1000 --json", 0, "item 5"),
    ("pipeplan simulate --forward 30,10,10,20 --comm-bandwidth 25", 2, "item 8"),
    ("pipeplan model --preset pi0 --mfu 40", 2, "item 8"),
    ("pipeplan plan --preset pi0 --gpus 8 --global-bach 256", 2, "item 9"),
    ("pipeplan plan --preset pi0 --gpus 8 --global 256", 2, "item 9"),
    ("pipeplan run --json --width 50", 2, "item 11"),
    ("pipeplan run --profile measured.json --nproc 2", 2, "walk: another model's profile"),
    ("pipeplan partition --layers 32 --layer-cost 2 --stages 4 --memory 1GiB", 2, "walk: a flag that does nothing"),
    ("pipeplan model --preset pi0 --gpu h100", 2, "walk: a name close to one"),
    ("pipeplan simulate --forward 30,10,10,20 --step", 2, "walk: a prefix of two flags"),
    ("pipeplan check --megatron-args examples/check/train_gpt.sh --measured-step 2.1s", 0,
     "issue 31: a Megatron-LM line checked"),
    ("pipeplan check --deepspeed-config examples/check/ds_config.json --preset pi0 --gpus 8", 0,
     "issue 31: a ds_config checked"),
    ("pipeplan check --torchtitan-config examples/check/llama3_8b.toml --gpus 8,16,32", 0,
     "issue 31: a torchtitan config checked, scaling rows"),
    ("pipeplan check --megatron-args examples/check/train_gpt.sh --measured-step 2.1", 2,
     "issue 31: a measured step that is not a time"),
    ("pipeplan plan --preset pi0 --gpus 8 --global-batch 64 --engine deepspeed --schedules zb-v", 2,
     "issue 31: a schedule the engine lacks"),
    ("pipeplan plan --spec examples/vla_from_configs.json --gpus 8 --global-batch 64", 0,
     "issue 33: a VLA spec from config.json files"),
    ("pipeplan plan --preset pi0 --gpus 16 --global-batch 500", 0, "issue 33: a batch that limits dp, noted"),
    ("pipeplan simulate --forward 30,10,10,20 -m 8 --schedules all", 0, "issue 33: schedules on the same ranks"),
]


@dataclass(frozen=True)
class Step:
    """One command's run: exit status, CPU and wall seconds, stdout bytes, last stderr line."""

    command: str
    why: str
    status: int
    cpu_s: float
    wall_s: float
    stdout_bytes: int
    said: str


def run_step(command: str, why: str, cwd: Path) -> Step:
    """Run ``command`` (``pipeplan ...``) as ``python -m pipeplan ...`` in ``cwd`` and time it."""
    argv = [sys.executable, "-m", "pipeplan", *shlex.split(command)[1:]]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "MPLBACKEND": "Agg", "COLUMNS": "200"}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return Step(command, why, done.returncode, cpu, wall, len(done.stdout.encode()), lines[-1] if lines else "")


def _cell(text: str, limit: int = 150) -> str:
    text = text.replace("|", "\\|").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def table(steps: list[Step]) -> str:
    """The markdown table of ``steps``."""
    rows = ["| # | command | why | exit | CPU s | wall s | stdout | last line on stderr |", "|---" * 8 + "|"]
    for index, step in enumerate(steps):
        rows.append(f"| {index} | `{step.command}` | {step.why} | {step.status} | {step.cpu_s:.2f} | "
                    f"{step.wall_s:.2f} | {step.stdout_bytes:,} B | {_cell(step.said)} |")
    return "\n".join(rows)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_write_flag(parser, DOC)
    args = parser.parse_args()
    steps: list[Step] = []
    with tempfile.TemporaryDirectory(prefix="pipeplan-first-hour-") as folder:
        shutil.copytree(ROOT / "examples", Path(folder) / "examples")  # the files the README's commands name
        for command, expected, why in WALK:
            step = run_step(command, why, Path(folder))
            steps.append(step)
            print(f"{step.status} {step.cpu_s:6.2f} CPU s  {command}", file=sys.stderr)
            if step.status != expected:
                print(f"first_hour: `{command}` exited {step.status}, expected {expected}: {step.said}",
                      file=sys.stderr)
                return 1
    body = table(steps) + "\n\n" + measured_line(run_command(["first_hour.py", "--write"]))
    print(body)
    if args.write:
        replace_between(DOC, "first-hour", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())

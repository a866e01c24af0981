"""What ``plan --mix`` costs: CPU seconds of ``pipeplan plan`` with and without a shape mix.

    python benchmarks/plan_mix.py                 # print the table
    python benchmarks/plan_mix.py --write         # also record it in docs/uneven_batches.md
    python benchmarks/plan_mix.py --repeats 1     # one run of each (faster, noisier)

Each case runs ``pipeplan plan --preset pi0 --gpus N --global-batch B --json`` as a child
process, without and with ``--mix examples/mix_cameras.csv``, alternating, ``--repeats``
times each; a run's CPU seconds are the child's user + system time
(``resource.getrusage(RUSAGE_CHILDREN)``, interpreter start-up included). The table gives
the medians, their ratio, and the re-ranking's own CPU seconds as ``--json`` reports it
(``mix.cpu_seconds``: the plans timed on the drawn batches, without building the shapes'
workloads) and how many batches each plan was timed on.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import add_write_flag, measured_line, replace_between, run_command  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIX = "examples/mix_cameras.csv"
#: (GPUs, global batch): the brief's 8-GPU case and the uneven-batches table's larger clusters.
CASES = ((8, 256), (64, 1024), (256, 4096))


def _run(argv: list[str]) -> tuple[float, dict]:
    """CPU seconds (user + system) of ``python -m pipeplan ARGV`` and its JSON output."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([sys.executable, "-m", "pipeplan", *argv], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "120"}, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(done.stdout)


def table(repeats: int) -> str:
    """The markdown table and its lines."""
    rows = ["| GPUs | global batch | plan CPU s | plan --mix CPU s | ratio | re-ranking CPU s | plans timed | "
            "batches per plan | best plan changes |",
            "|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for gpus, batch in CASES:
        base = ["plan", "--preset", "pi0", "--gpus", str(gpus), "--global-batch", str(batch), "--json"]
        plain, mixed, ranking = [], [], []
        payload: dict = {}
        for _ in range(repeats):
            plain.append(_run(base)[0])
            seconds, payload = _run([*base, "--mix", MIX])
            mixed.append(seconds)
            ranking.append(payload["mix"]["cpu_seconds"])
        mix = payload["mix"]
        timed = [row for row in mix["rows"] if row["re_ranked"]]
        draws = sorted({row["draws"] for row in timed})
        drawn = str(draws[0]) if len(draws) == 1 else f"{draws[0]}–{draws[-1]}"
        change = f"yes: plan {mix['best_planned_rank']}" if mix["best_changed"] else "no"
        a, b = statistics.median(plain), statistics.median(mixed)
        rows.append(f"| {gpus} | {batch} | {a:.2f} | {b:.2f} | {b / a:.2f}× | {statistics.median(ranking):.2f} | "
                    f"{len(timed)} | {drawn} | {change} |")
    note = (f"π0 preset on H100s, mix {MIX} (1–4 cameras), medians of {repeats} alternating runs of each; CPU s "
            "is the whole child process (start-up, search, output).")
    return "\n".join([*rows, "", note, "",
                      measured_line(run_command([sys.argv[0], "--repeats", str(repeats), "--write"]))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command (default 3)")
    add_write_flag(parser, "docs/uneven_batches.md")
    args = parser.parse_args(argv)
    body = table(args.repeats)
    print(body)
    if args.write:
        replace_between(ROOT / "docs" / "uneven_batches.md", "plan-mix-cost", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

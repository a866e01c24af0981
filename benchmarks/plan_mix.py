"""What ``plan --mix`` costs and how its branch and bound went: ``pipeplan plan`` with and without a shape mix.

    python benchmarks/plan_mix.py                 # print the table
    python benchmarks/plan_mix.py --write         # also record it in docs/uneven_batches.md
    python benchmarks/plan_mix.py --repeats 1     # one run of each (faster, noisier)
    python benchmarks/plan_mix.py --before ../other/src   # also time another checkout's plan --mix, alternating

Each case runs ``pipeplan plan --preset pi0 --gpus N --global-batch B --json`` as a child
process, without and with ``--mix examples/mix_cameras.csv``, alternating, ``--repeats``
times each; a run's CPU seconds are the child's user + system time
(``resource.getrusage(RUSAGE_CHILDREN)``, interpreter start-up included). The table gives
the medians, their ratio, and the mix's own CPU seconds as ``--json`` reports it
(``mix.cpu_seconds``: the search at the mix's mean sample and the plans timed on the drawn
batches, without building the shapes' workloads), the plans it listed, timed and ruled out
by their bound, whether the answer is the best of the searched space, and how many batches
each plan was timed on. ``--before SRC`` runs ``plan --mix`` a third way, with ``PYTHONPATH=SRC``
(another checkout's ``src``, e.g. before a change), and adds its median and the ratio.

Under the table, the margin :data:`~pipeplan.planner.mix_search.JENSEN_SLACK` is checked: every
plan the search at the mean sample lists is timed (no branch and bound) and the largest
shortfall of its expected step below its mean-sample step is given, per case.
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

from pipeplan.planner.mix_search import JENSEN_SLACK  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
MIX = "examples/mix_cameras.csv"
#: (GPUs, global batch): the brief's 8-GPU case and the uneven-batches table's larger clusters.
CASES = ((8, 256), (64, 1024), (256, 4096))


def _run(argv: list[str], src: str | None = None) -> tuple[float, dict]:
    """CPU seconds (user + system) of ``python -m pipeplan ARGV`` and its JSON output (``src``: its PYTHONPATH)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    env = {**os.environ, "COLUMNS": "120", **({"PYTHONPATH": src} if src else {})}
    done = subprocess.run([sys.executable, "-m", "pipeplan", *argv], cwd=ROOT, capture_output=True, text=True,
                          env=env, check=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, json.loads(done.stdout)


def _shortfall(gpus: int, batch: int) -> tuple[int, float]:
    """Plans listed at the mean sample, and the largest share by which one's expected step is below its mean-sample step."""
    from pipeplan import hardware, presets
    from pipeplan.batches import read_mix
    from pipeplan.planner import Cluster, SearchOptions, Workload, search
    from pipeplan.planner.mix_rank import MixCandidate, rank_on_mix
    from pipeplan.planner.mix_search import mean_sample_workload

    cluster = Cluster.of("h100-80g", gpus)
    device = hardware.device("h100-80g")
    mix = read_mix(str(ROOT / MIX))
    shaped = [Workload.from_spec(presets.get("pi0", **shape), device, tp_link=cluster.intra_node)
              for shape in mix.shapes]
    mean = mean_sample_workload(shaped, mix.weights)
    options = SearchOptions()
    plans = search(mean, cluster, batch, options).plans
    ranking = rank_on_mix([MixCandidate(f"mean {i}", plan, None, mean_rank=i) for i, plan in enumerate(plans, 1)],
                          mix, shaped, mean, global_batch=batch, cluster=cluster, send_mode=options.send_mode)
    worst = max(max(0.0, (row.mean_sample_ms - row.expected_ms) / row.mean_sample_ms)
                for row in ranking.plans if row.expected_ms is not None and row.mean_sample_ms)
    return len(plans), worst


def table(repeats: int, before: str | None = None) -> str:
    """The markdown table and its lines."""
    extra = " before --mix CPU s | after / before |" if before else ""
    rows = ["| GPUs | global batch | plan CPU s | plan --mix CPU s | ratio |" + extra + " mix CPU s | plans listed | "
            "plans timed | ruled out by the bound | best of the space | batches per plan | best plan changes |",
            "|---:|---:|---:|---:|---:|" + ("---:|---:|" if before else "") + "---:|---:|---:|---:|---|---:|---|"]
    shortfalls = []
    for gpus, batch in CASES:
        base = ["plan", "--preset", "pi0", "--gpus", str(gpus), "--global-batch", str(batch), "--json"]
        plain, mixed, old, ranking = [], [], [], []
        payload: dict = {}
        for _ in range(repeats):
            plain.append(_run(base)[0])
            seconds, payload = _run([*base, "--mix", MIX])
            mixed.append(seconds)
            ranking.append(payload["mix"]["cpu_seconds"])
            if before:
                old.append(_run([*base, "--mix", MIX], before)[0])
        mix = payload["mix"]
        timed = [row for row in mix["rows"] if row["re_ranked"]]
        searched = [row for row in timed if row["planned_rank"] is not None or row["mean_rank"] is not None]
        draws = sorted({row["draws"] for row in timed})
        drawn = str(draws[0]) if len(draws) == 1 else f"{draws[0]}–{draws[-1]}"
        best = next(row for row in mix["rows"] if row["rank"] == 1)
        change = ((f"yes: plan {mix['best_planned_rank']}" if mix["best_planned_rank"] else
                   f"yes: mean-sample plan {best['mean_rank']}, not shown") if mix["best_changed"] else "no")
        a, b = statistics.median(plain), statistics.median(mixed)
        then = f" {statistics.median(old):.2f} | {b / statistics.median(old):.2f}× |" if before else ""
        rows.append(f"| {gpus} | {batch} | {a:.2f} | {b:.2f} | {b / a:.2f}× |{then} {statistics.median(ranking):.2f} | "
                    f"{mix['plans_listed']} | {len(searched)} | {mix['plans_bounded']} | "
                    f"{'yes' if mix['exact'] else 'no'} | {drawn} | {change} |")
        shortfalls.append((gpus, *_shortfall(gpus, batch)))
    note = (f"π0 preset on H100s, mix {MIX} (1–4 cameras), medians of {repeats} alternating runs of each; CPU s "
            "is the whole child process (start-up, search, output); mix CPU s: `--json`'s `mix.cpu_seconds` (the "
            "search at the mean sample and the timing). Plans timed: the searched plans timed on the drawn batches "
            "(plan 1 always); ruled out: listed plans whose bound was no less than the best expected step.")
    if before:
        note += f" Before: `plan --mix` with PYTHONPATH={before}, alternating with the others."
    slack = ("Every listed plan timed, the largest shortfall of the expected step below the mean-sample step: "
             + "; ".join(f"{gpus} GPUs {share:.2%} over {count} plans" for gpus, count, share in shortfalls)
             + f" (the margin kept for plans beyond the list: {JENSEN_SLACK:.0%}).")
    command = [sys.argv[0], "--repeats", str(repeats), *(["--before", before] if before else []), "--write"]
    return "\n".join([*rows, "", note, "", slack, "", measured_line(run_command(command))])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each command (default 3)")
    parser.add_argument("--before", metavar="SRC", default=None,
                        help="also time plan --mix with PYTHONPATH=SRC (another checkout's src)")
    add_write_flag(parser, "docs/uneven_batches.md")
    args = parser.parse_args(argv)
    body = table(args.repeats, args.before)
    print(body)
    if args.write:
        replace_between(ROOT / "docs" / "uneven_batches.md", "plan-mix-cost", body)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

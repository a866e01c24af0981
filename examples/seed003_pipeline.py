"""Seed lesson 003's 4-stage demo: a GPipe step, its Gantt chart and its bubble.

    python examples/seed003_pipeline.py                 # N = 4 stages, M = 8 microbatches
    python examples/seed003_pipeline.py --microbatches 64

Runs real microbatches through four equal stages, measures each stage's forward
and backward, schedules GPipe on those times and prints the measured bubble beside
the closed form (N-1)/(M+N-1). The same demo is ``pipeplan demo``.
"""

from __future__ import annotations

import argparse

from pipeplan.lessons.pipeline import run_demo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stages", type=int, default=4, help="pipeline stages N (default 4)")
    parser.add_argument("--microbatches", type=int, default=8, help="microbatches M (default 8)")
    args = parser.parse_args()
    print(run_demo(num_stages=args.stages, num_microbatches=args.microbatches))


if __name__ == "__main__":
    main()

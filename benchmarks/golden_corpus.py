"""A golden corpus of the CLI's machine outputs: record before a move, check after it.

    python benchmarks/golden_corpus.py --record /tmp/golden        # on the code before the move
    python benchmarks/golden_corpus.py --check /tmp/golden         # after: byte for byte, timings aside
    python benchmarks/golden_corpus.py --check /tmp/golden --only plan-pi0   # the cases whose name starts so

What it records (issue 30's corpus: presets × clusters × engines as in docs/planner.md's tables):

* ``plan --json`` for the VLA presets and a GPT on 8 and 32 H100s, 8 A100s (RoCE between nodes)
  and 8 L40S on PCIe, plus pinned runs (``--pp``, ``--tp``, ``--dp-modes``, ``--grad-sync``,
  ``--memory``, ``--optimizer``, ``--schedules``) that reach the pipelined and sharded corners;
* every export (megatron, deepspeed, torchtitan, torchtitan-toml, torch) of a GPT, a VLA preset and
  the example spec, as the CLI's ``--json`` (which holds every file it would write);
* ``partition --json`` and ``simulate --json`` over schedules, profiles and presets.

Timings are the only fields taken out before comparing (``search.seconds``, ``seconds``): every
other byte of every output must match. The corpus is kept outside the repository (about 20 MB).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXAMPLE_SPEC = ROOT / "examples" / "model_spec.json"
#: keys whose values are wall or CPU time of this run, not a prediction
TIMING_KEYS = frozenset({"seconds", "cpu_seconds", "wall_seconds", "elapsed"})

_VLA = ("pi0", "pi0.5", "pi0-fast", "openvla-7b", "openvla-oft", "gr00t-n1", "cogact", "smolvla", "rdt-1b")
_CLUSTERS = {
    "h100x8": ["--gpu", "h100-80g", "--gpus", "8"],
    "h100x32": ["--gpu", "h100-80g", "--gpus", "32"],
    "a100x8": ["--gpu", "a100-80g", "--gpus", "8", "--inter-link", "roce-400g"],
    "l40sx8": ["--gpu", "l40s", "--gpus", "8", "--intra-link", "pcie-gen4"],
}
_ENGINES = ("megatron", "deepspeed", "torchtitan", "torchtitan-toml", "torch")


def cases() -> dict[str, list[str]]:
    """Every case: its name → the ``pipeplan`` arguments (an export's files come in its ``--json``)."""
    out: dict[str, list[str]] = {}
    for preset in _VLA + ("gpt-1.5b",):
        for cluster, flags in _CLUSTERS.items():
            if cluster == "h100x32" and preset not in ("pi0", "openvla-7b", "gr00t-n1", "gpt-1.5b"):
                continue
            out[f"plan-{preset}-{cluster}"] = ["plan", "--preset", preset, *flags, "--global-batch", "256", "--json"]
    out["plan-driving-6cam-h100x32"] = ["plan", "--preset", "driving-6cam", *_CLUSTERS["h100x32"],
                                        "--global-batch", "256", "--json"]
    pinned = {
        "pi0-pp2-40g": ["--preset", "pi0", "--gpus", "16", "--memory", "40GiB", "--pp", "2"],
        "pi0-pp4-zbv": ["--preset", "pi0", "--gpus", "16", "--pp", "4", "--schedules", "zb-v,1f1b,interleaved"],
        "openvla-a100-40g": ["--preset", "openvla-7b", "--gpus", "16", "--gpu", "a100-40g"],
        "gpt-tp2-pp4": ["--preset", "gpt-1.5b", "--gpus", "16", "--tp", "2", "--pp", "4"],
        "gpt-ddp-torch": ["--preset", "gpt-1.5b", "--gpus", "8", "--dp-modes", "ddp", "--grad-sync", "torch-ddp"],
        "gpt-zero1-megatron": ["--preset", "gpt-1.5b", "--gpus", "8", "--dp-modes", "zero1", "--grad-sync", "megatron"],
        "gr00t-fsdp-hsdp": ["--preset", "gr00t-n1", "--gpus", "32", "--dp-modes", "fsdp,hsdp"],
        "cogact-optimizer": ["--preset", "cogact", "--gpus", "8", "--optimizer", "12"],
        "pi0-mb-even": ["--preset", "pi0", "--gpus", "8", "--micro-batch-size", "4", "--pp", "2", "--partition", "even"],
        "spec-example": ["--spec", str(EXAMPLE_SPEC), "--gpus", "8"],
        "pi0-mfu": ["--preset", "pi0", "--gpus", "8", "--mfu", "0.4"],
        "pi0-send": ["--preset", "pi0", "--gpus", "8", "--pp", "2", "--send", "rendezvous", "--memory", "40GiB"],
    }
    for name, flags in pinned.items():
        out[f"plan-pinned-{name}"] = ["plan", *flags, "--global-batch", "256", "--json"]
    exports = {
        "gpt": ["--preset", "gpt-1.5b", "--gpus", "16", "--pp", "4"],
        "gpt-nopp": ["--preset", "gpt-1.5b", "--gpus", "8", "--pp", "1"],
        "pi0": ["--preset", "pi0", "--gpus", "16", "--memory", "40GiB", "--pp", "2"],
        "pi0-nopp": ["--preset", "pi0", "--gpus", "8"],
        "spec": ["--spec", str(EXAMPLE_SPEC), "--gpus", "8", "--pp", "2"],
    }
    for name, flags in exports.items():
        for engine in _ENGINES:
            out[f"export-{engine}-{name}"] = ["plan", *flags, "--global-batch", "128", "--json", "--export", engine]
    out["export-partition-megatron-gpt"] = ["partition", "--preset", "gpt-1.5b", "--stages", "4", "--json",
                                            "--export", "megatron"]
    out["export-partition-torch-pi0"] = ["partition", "--preset", "pi0", "--stages", "4", "--json",
                                         "--export", "torch"]
    for stages in (2, 4):
        for preset in ("pi0", "openvla-7b", "gr00t-n1", "gpt-1.5b"):
            out[f"partition-{preset}-{stages}"] = ["partition", "--preset", preset, "--stages", str(stages),
                                                   "--micro-batch-size", "4", "--json"]
    out["partition-layers"] = ["partition", "--layers", "24", "--layer-cost", "2", "--first-extra", "9",
                               "--last-extra", "5", "--stages", "4", "--json"]
    out["partition-layers-memory"] = ["partition", "--layers", "24", "--layer-cost", "2", "--layer-params", "1e8",
                                      "--layer-activation", "200MB", "--stages", "4", "--memory", "8GB", "--json",
                                      "--schedule", "zb-h1", "--objective", "step-time"]
    for schedule in ("gpipe", "1f1b", "interleaved", "zb-h1", "zb-h2", "zb-v", "adaptive"):
        out[f"simulate-{schedule}"] = ["simulate", "--forward", "30,10,10,20", "-m", "8", "--schedule", schedule,
                                       "--json"]
    out["simulate-rendezvous"] = ["simulate", "--forward", "30,10,10,20", "-m", "8", "--send", "rendezvous",
                                  "--comm-latency", "1", "--json"]
    out["simulate-preset-zbh1"] = ["simulate", "--preset", "pi0", "--stages", "4", "--partition", "auto",
                                   "--micro-batch-size", "4", "--schedule", "zb-h1", "--json"]
    out["simulate-preset-adaptive"] = ["simulate", "--preset", "gr00t-n1", "--stages", "4", "--partition", "auto",
                                       "--schedule", "adaptive", "--json"]
    out["simulate-dual-rate"] = ["simulate", "--forward", "3,1,1,2", "--backward", "6,2,2,4", "-m", "8",
                                 "--schedule", "dual-rate", "--json"]
    return out


def _scrub(value: object) -> object:
    """The output with its timing fields removed (recursively)."""
    if isinstance(value, dict):
        return {key: _scrub(item) for key, item in value.items() if key not in TIMING_KEYS}
    if isinstance(value, list):
        return [_scrub(item) for item in value]
    return value


def run_case(name: str, argv: list[str], pipeplan: str) -> dict[str, str]:
    """Run one case in a scratch folder: file name → text (``stdout.json``, ``rc``, the export's files)."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [pipeplan, *argv]
        done = subprocess.run(command, cwd=scratch, capture_output=True, text=True,
                              env={**os.environ, "COLUMNS": "120"})
        files = {"rc": f"{done.returncode}\n"}
        try:
            files["stdout.json"] = json.dumps(_scrub(json.loads(done.stdout)), indent=1, sort_keys=True) + "\n"
        except json.JSONDecodeError:
            files["stdout.txt"] = done.stdout
            files["stderr.txt"] = done.stderr
        export = Path(scratch) / "export"
        if export.is_dir():
            for path in sorted(export.rglob("*")):
                if path.is_file():
                    files[f"export/{path.relative_to(export)}"] = path.read_text().replace(scratch, "SCRATCH")
        return files


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--record", type=Path, help="write the corpus into this folder (replaced)")
    group.add_argument("--check", type=Path, help="compare with the corpus in this folder")
    parser.add_argument("--only", default="", help="only the cases whose name starts with this")
    parser.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    args = parser.parse_args()
    pipeplan = str(Path(sys.executable).parent / "pipeplan")
    chosen = {name: argv for name, argv in cases().items() if name.startswith(args.only)}
    with ThreadPoolExecutor(args.jobs) as pool:
        results = dict(zip(chosen, pool.map(lambda item: run_case(item[0], item[1], pipeplan), chosen.items())))
    if args.record:
        for name, files in results.items():
            folder = args.record / name
            shutil.rmtree(folder, ignore_errors=True)
            for relative, text in files.items():
                (folder / relative).parent.mkdir(parents=True, exist_ok=True)
                (folder / relative).write_text(text)
        print(f"recorded {len(results)} cases in {args.record}")
        return 0
    differ = 0
    for name, files in results.items():
        folder = args.check / name
        recorded = {str(p.relative_to(folder)): p.read_text() for p in folder.rglob("*") if p.is_file()} \
            if folder.is_dir() else {}
        if recorded != files:
            differ += 1
            changed = sorted(k for k in set(recorded) | set(files) if recorded.get(k) != files.get(k))
            print(f"DIFFERS {name}: {', '.join(changed)}")
    print(f"{len(results) - differ} of {len(results)} cases identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())

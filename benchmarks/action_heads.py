"""What an action head costs per example with its noise samples said as `noise_samples` or as `repeats` (docs/cost_model.md).

    python benchmarks/action_heads.py            # print the table
    python benchmarks/action_heads.py --write    # also record it in docs/cost_model.md

For every preset with a flow-matching or diffusion head: the head (its embedding projector,
its transformer stack and its output projector) in training TFLOP per example (F + B + W, no
recompute, :func:`pipeplan.models.layer_costs.flops_per_sample`) as the reference trains it,
then with 10 noise samples said as ``noise_samples: 10`` (the context's K/V projected once per
example) and as ``repeats: 10`` (the whole head rerun, context projection included), and the
share of the ``repeats`` figure that is the context's K/V projection. Computed from the shapes;
nothing is measured.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _markers import computed_line, print_or_write  # noqa: E402

from pipeplan import presets  # noqa: E402
from pipeplan.models.layer_costs import flops_per_sample  # noqa: E402
from pipeplan.models.spec import ModelSpec  # noqa: E402

DOC = Path(__file__).resolve().parent.parent / "docs" / "cost_model.md"
COMMAND = "python benchmarks/action_heads.py --write"
SAMPLES = 10
#: preset → its head's modules: the embedding projector, the stack, the output projector.
HEADS: dict[str, tuple[str, str, str]] = {
    "pi0": ("action_embedding", "action_expert", "action_output"),
    "pi0.5": ("action_embedding", "action_expert", "action_output"),
    "gr00t-n1": ("action_embedding", "action_dit", "action_output"),
    "gr00t-n1.5": ("action_embedding", "action_dit", "action_output"),
    "rdt-1b": ("action_embedding", "rdt", "action_output"),
    "smolvla": ("action_embedding", "action_expert", "action_output"),
    "cogact": ("action_embedding", "action_dit", "action_output"),
    "driving-6cam": ("action_embedding", "action_head", "action_output"),
}


def _head_flops(spec: ModelSpec, names: tuple[str, ...], **fields: int) -> float:
    """Training FLOPs per example of the head's modules, with ``fields`` set on each of them."""
    changed = ModelSpec(spec.name, tuple(replace(m, **fields) if m.name in names else m for m in spec.modules))
    flops = flops_per_sample(changed)
    return sum(flops[name] for name in names)


def _reference(spec: ModelSpec, stack: str) -> str:
    module = spec.module(stack)
    samples = getattr(module, "noise_samples", 1)
    return f"`repeats: {module.repeats}`" if module.repeats > 1 else f"`noise_samples: {samples}`"


def table() -> str:
    """One row per preset with an action head."""
    rows = ["| preset | head stack | reference | head TFLOP / example | 10 as `noise_samples` | 10 as `repeats` "
            "| context K/V in the `repeats` figure |", "|---|---|---|---:|---:|---:|---:|"]
    for name, names in HEADS.items():
        spec = presets.get(name)
        reference = sum(flops_per_sample(spec)[module] for module in names)
        sampled = _head_flops(spec, names, repeats=1, noise_samples=SAMPLES)
        repeated = _head_flops(spec, names, repeats=SAMPLES, noise_samples=1)
        once = _head_flops(spec, names, repeats=1, noise_samples=1)
        # repeats = N reruns everything; noise_samples = N everything but the context K/V: the difference is
        # N − 1 context projections, so the N of them in the repeats figure are N / (N − 1) of it
        context = (repeated - sampled) * SAMPLES / (SAMPLES - 1)
        rows.append(f"| `{name}` | {names[1]} | {_reference(spec, names[1])} | {reference / 1e12:.3f} | "
                    f"{sampled / 1e12:.3f} | {repeated / 1e12:.3f} | {context / repeated:.0%} |")
        assert repeated >= sampled and abs(repeated - SAMPLES * once) <= 1e-9 * repeated
    return "\n".join(rows)


def block() -> str:
    """What ``--write`` records between the ``action-heads`` markers (tests/test_docs_tables.py checks it)."""
    return "\n\n".join([table(), computed_line(COMMAND)])


def main() -> int:
    return print_or_write(DOC, "action-heads", block, __doc__.splitlines()[0])


if __name__ == "__main__":
    sys.exit(main())

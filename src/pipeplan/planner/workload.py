"""What the planner plans: per-layer costs for each micro-batch size and recompute mode.

A :class:`Workload` is the narrow interface between a model description and the
search. It answers one question, "what does each layer cost with micro-batch
size ``b`` under recompute mode ``r``?", as a :class:`~pipeplan.layers.LayerProfile`,
plus what the search needs for throughput and memory::

    from pipeplan.layers import LayerProfile
    from pipeplan.planner import Workload
    work = Workload.from_profile(LayerProfile.uniform(32, forward=1.0, params=1e8, activation_bytes=1e8))
    work.profile(1, "none").num_layers      # 32

Recompute, in profile terms (what a source must give for modes other than ``"none"``):

* ``activation_bytes`` is what the layer keeps per microbatch under that mode;
* ``backward`` includes the recomputed forward work (``weight`` does not change).

The profile's ``trainable_params`` (frozen layers hold only weights) and
``send_bytes`` (what crosses a cut after a layer) feed the memory model and the
messages. A measured profile is one micro-batch size and no recompute unless the
caller passes profiles for more; :meth:`Workload.from_spec` answers every
micro-batch size and all three modes from a :class:`~pipeplan.models.spec.ModelSpec`::

    from pipeplan import hardware, presets
    work = Workload.from_spec(presets.get("pi0"), hardware.device("h100-80g"))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .._validation import positive_int
from ..errors import InvalidInputError
from ..layers import LayerProfile
from ..plan import RECOMPUTE_MODES, Recompute

__all__ = ["Workload"]

ProfileSource = Callable[[int, Recompute], LayerProfile]


@dataclass(frozen=True)
class Workload:
    """A model as the planner sees it.

    Args:
        source: ``source(micro_batch_size, recompute)`` → the per-layer profile
            (times in ``time_unit`` seconds, bytes per microbatch).
        micro_batch_sizes: the micro-batch sizes ``source`` answers for
            (``None``: any size).
        recompute_modes: the modes ``source`` answers for (``"none"`` always).
        flops_per_sample: model FLOPs of one sample's forward and backward
            (no recompute), for MFU; ``None`` if unknown.
        tokens_per_sample: tokens per sample, for tokens/s; ``None`` if unknown.
        time_unit: seconds per profile time unit (``1e-3``: milliseconds).
        name: for reports.
    """

    source: ProfileSource
    micro_batch_sizes: tuple[int, ...] | None = None
    recompute_modes: tuple[Recompute, ...] = ("none",)
    flops_per_sample: float | None = None
    tokens_per_sample: float | None = None
    time_unit: float = 1e-3
    name: str = "model"
    _cache: dict[tuple[int, str], LayerProfile] = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        unknown = [mode for mode in self.recompute_modes if mode not in RECOMPUTE_MODES]
        if unknown or "none" not in self.recompute_modes:
            raise InvalidInputError(
                f"recompute_modes must include 'none' and be among {', '.join(RECOMPUTE_MODES)}, "
                f"got {list(self.recompute_modes)}"
            )

    @classmethod
    def from_profile(cls, profile: LayerProfile, *, micro_batch_size: int = 1, **options: object) -> Workload:
        """A measured (or hand-written) profile: one micro-batch size, no recompute."""
        size = positive_int("micro_batch_size", micro_batch_size)
        return cls.from_profiles({(size, "none"): profile}, **options)

    @classmethod
    def from_spec(cls, spec: Any, device: Any, *, tensor_parallel: int = 1) -> Workload:
        """Every micro-batch size and recompute mode of a :class:`~pipeplan.models.spec.ModelSpec` on ``device``.

        Times are ``spec.to_layer_profile`` milliseconds (each layer's kernels
        timed by the device, docs/cost_model.md); MFU counts the spec's training FLOPs without
        recompute; tokens per sample are those of its longest module.
        """

        def source(size: int, mode: Recompute) -> LayerProfile:
            return spec.to_layer_profile(device, size, recompute=mode, tensor_parallel=tensor_parallel)

        tokens = spec.module_tokens()
        return cls(
            source,
            recompute_modes=RECOMPUTE_MODES,
            flops_per_sample=float(sum(spec.flops_per_sample(recompute="none").values())),
            tokens_per_sample=float(max(tokens.values())) if tokens else None,
            name=getattr(spec, "name", "model"),
        )

    @classmethod
    def from_profiles(cls, profiles: Mapping[tuple[int, Recompute], LayerProfile], **options: object) -> Workload:
        """Profiles given per ``(micro_batch_size, recompute)``; each size needs ``"none"``."""
        if not profiles:
            raise InvalidInputError("profiles must hold at least one (micro_batch_size, recompute) entry")
        table = dict(profiles)
        sizes = tuple(sorted({size for size, _ in table}))
        modes = tuple(mode for mode in RECOMPUTE_MODES if all((size, mode) in table for size in sizes))
        lengths = {profile.num_layers for profile in table.values()}
        if len(lengths) != 1:
            raise InvalidInputError(f"every profile must have the same layers, got layer counts {sorted(lengths)}")

        def source(size: int, mode: Recompute) -> LayerProfile:
            return table[(size, mode)]

        return cls(source, micro_batch_sizes=sizes, recompute_modes=modes, **options)  # type: ignore[arg-type]

    # ---------------------------------------------------------------- queries
    def profile(self, micro_batch_size: int, recompute: Recompute = "none") -> LayerProfile:
        """The per-layer profile for one micro-batch size and recompute mode (cached)."""
        key = (micro_batch_size, recompute)
        cached = self._cache.get(key)
        if cached is None:
            if self.micro_batch_sizes is not None and micro_batch_size not in self.micro_batch_sizes:
                raise InvalidInputError(
                    f"micro_batch_size must be one of {list(self.micro_batch_sizes)} for this profile, "
                    f"got {micro_batch_size}"
                )
            if recompute not in self.recompute_modes:
                raise InvalidInputError(
                    f"recompute must be one of {', '.join(self.recompute_modes)} for this workload, got {recompute!r}"
                )
            cached = self.source(micro_batch_size, recompute)
            self._cache[key] = cached
        return cached

    @property
    def num_layers(self) -> int:
        """Layers of the model."""
        return self.profile(self.smallest_micro_batch).num_layers

    @property
    def smallest_micro_batch(self) -> int:
        """The smallest micro-batch size the source answers for."""
        return min(self.micro_batch_sizes) if self.micro_batch_sizes else 1

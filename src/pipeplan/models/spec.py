"""ModelSpec: a model described by its published shapes (the modules, their links, their parameters).

A :class:`ModelSpec` is an ordered list of modules (a vision encoder, a projector,
an embedding, transformer stacks, an LM head), validated on construction, loaded
from and written to JSON/YAML files. What it costs to train, per pipeline layer,
is :mod:`pipeplan.models.layer_costs`::

    from pipeplan import presets
    spec = presets.get("pi0")
    spec.num_parameters(), spec.module_parameters()["action_expert"]   # 3,238,048,528, 311,464,960
    spec.trains("vision"), spec.with_frozen({"vision": True}).trainable_parameters()

torch-free.

Module kinds (frozen dataclasses in :mod:`pipeplan.models.modules`; the file
schema, to and from dicts, field checks, JSON/YAML, in ``pipeplan.models._schema``):

* :class:`~pipeplan.models.modules.VisionEncoder` — a ViT: ``image_size``,
  ``patch_size``, ``cameras``, ``frames`` give the patch tokens
  (``cameras · frames · (image/patch)²``); each image is its own attention
  sequence. One patch-embedding layer, then ``num_layers`` blocks.
* :class:`~pipeplan.models.modules.TransformerStack` — ``num_layers`` blocks:
  hidden ``h``, heads ``a``, KV heads (MHA / GQA / MQA), head dim, FFN width,
  plain or gated MLP, norm type, ``seq_length`` tokens per sequence; optional
  :class:`~pipeplan.models.modules.CrossAttention` to another module's output, or
  ``joint_with`` another stack (π0's action expert: its layer ``i`` attends to the
  keys/values of the other stack's layer ``i``).
* :class:`~pipeplan.models.modules.Projector` — a chain of linear layers (an MLP
  projector, action or time embeddings).
* :class:`~pipeplan.models.modules.Embedding` and
  :class:`~pipeplan.models.modules.LMHead` (tied or untied).

Every module has ``frozen`` (no weight gradients, no optimizer state), ``inputs``
(the modules whose outputs it reads; default the previous module, ``()`` for data
only) and ``repeats`` (runs of the whole module per example, what it reads
included: CogACT repeats its cognition feature and actions 8 times before its
DiT). A transformer stack or projector also has ``noise_samples``: the noise
samples a flow-matching or diffusion head trains on per example, its own tokens
running once per sample while a cross layer projects the context's keys and
values once per example (π0, GR00T, RDT and SmolVLA draw one). Inference
denoising steps never enter the training cost.
"""
from __future__ import annotations

import functools

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import InvalidInputError
from ..plan import Recompute
from ._layer_math import Shape, layer_part
from ._schema import (check_module, module_from_record, module_record, modules_from_payload, read_payload,
                      reported_defaults)
from .hf_config import bare_payload, expand_payload, is_hf_config
from .modules import LMHead, Module, Projector, TransformerStack, VisionEncoder, layer_depth
from .training import ReferenceTraining

__all__ = ["ModelSpec"]


@dataclass(frozen=True)
class ModelSpec:
    """An ordered list of modules (see the module doc), validated on construction.

    Args:
        name: a label.
        modules: the modules in pipeline order; names are unique.
        description: free text (shapes and sources).
        training: the reference code's training recipe (presets), or ``None``.
        defaulted: per module name, the fields a spec file left out whose default changes the cost
            (``FieldSpec.reported``; ``pipeplan.models.schema_docs.defaults_text`` words them); empty
            for a spec built in Python.
        assumed: what the spec's Hugging Face ``config.json`` files left out or could not say and
            pipeplan took instead (:mod:`pipeplan.models.hf_config`: HF's own defaults, token counts),
            one sentence each; empty for a spec without configs.

    Raises:
        InvalidInputError: a missing, non-integer or non-positive shape, heads that
            do not divide the hidden size (without ``head_dim``), KV heads that do
            not divide heads, an unknown or later ``inputs`` / ``cross_attention`` /
            ``joint_with`` name, a joint pair of different depths or heads.
    """

    name: str
    modules: tuple[Module, ...]
    description: str = ""
    training: ReferenceTraining | None = field(default=None, compare=False)
    defaulted: Mapping[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)
    assumed: tuple[str, ...] = field(default=(), compare=False, repr=False)
    _index: Mapping[str, int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.modules, (tuple, list)) or not self.modules:
            raise InvalidInputError(f"model {self.name!r}: modules must be a non-empty list")
        object.__setattr__(self, "modules", tuple(self.modules))
        index: dict[str, int] = {}
        for position, module in enumerate(self.modules):
            check_module(module, position)
            if module.name in index:
                raise InvalidInputError(f"model {self.name!r}: module name {module.name!r} is used twice")
            index[module.name] = position
        object.__setattr__(self, "_index", index)
        for position, module in enumerate(self.modules):
            self._check_links(module, position)

    def _check_links(self, module: Module, position: int) -> None:
        where = f"modules[{position}] ({module.name})"
        for source in self.inputs_of(module):
            if self._index.get(source, position) >= position:
                raise InvalidInputError(
                    f"{where}.inputs names {source!r}, which is not a module listed before it"
                )
        if isinstance(module, TransformerStack):
            cross = module.cross_attention
            if cross is not None and self._index.get(cross.source, position) >= position:
                raise InvalidInputError(
                    f"{where}.cross_attention.source must name a module listed before it, got {cross.source!r}"
                )
            if module.joint_with is not None:
                partner = self.modules[position - 1] if position else None
                if partner is None or partner.name != module.joint_with or not isinstance(partner, TransformerStack):
                    raise InvalidInputError(
                        f"{where}.joint_with must name the transformer stack listed right before it, "
                        f"got {module.joint_with!r}"
                    )
                for attr in ("num_layers", "num_heads", "kv_heads", "dim_per_head"):
                    if getattr(partner, attr) != getattr(module, attr):
                        raise InvalidInputError(
                            f"{where}: a joint pair needs equal {attr}, got {getattr(partner, attr)} "
                            f"({partner.name}) and {getattr(module, attr)} ({module.name})"
                        )
                if partner.joint_with is not None or partner.cross_attention or module.cross_attention:
                    raise InvalidInputError(f"{where}: a joint pair cannot chain or cross-attend")
                if self._index.get(partner.name) is not None:
                    for source in self.inputs_of(module):
                        if self._index[source] >= position - 1:
                            raise InvalidInputError(
                                f"{where}.inputs must come before its joint partner {partner.name!r}, "
                                f"got {source!r}"
                            )

    # ------------------------------------------------------------ structure
    def module(self, name: str) -> Module:
        """The module called ``name``."""
        if name not in self._index:
            raise InvalidInputError(f"model {self.name!r} has no module {name!r}; modules: {', '.join(self._index)}")
        return self.modules[self._index[name]]

    def inputs_of(self, module: Module) -> tuple[str, ...]:
        """Names of the modules whose outputs ``module`` reads (its ``inputs``, resolved)."""
        if module.inputs is not None:
            return tuple(module.inputs)
        position = self._index[module.name]
        if position == 0:
            return ()
        previous = self.modules[position - 1]
        if isinstance(module, TransformerStack) and module.joint_with == previous.name:
            return self.inputs_of(previous) if position >= 2 else ()
        return (previous.name,)

    def trains(self, name: str) -> bool:
        """Whether module ``name`` has trainable parameters."""
        module = self.module(name)
        if isinstance(module, LMHead) and module.tied_to:
            return not module.frozen  # its gradient goes to the shared table
        return not module.frozen and self._own_parameters(module) > 0

    def needs_grad(self, name: str) -> bool:
        """Whether a gradient must reach module ``name``'s output (it or something upstream trains)."""
        module = self.module(name)
        if self.trains(name):
            return True
        upstream = list(self.inputs_of(module))
        if isinstance(module, TransformerStack):
            if module.cross_attention is not None:
                upstream.append(module.cross_attention.source)
            if module.joint_with is not None:
                upstream.append(module.joint_with)
        return any(self.needs_grad(source) for source in upstream)

    # ----------------------------------------------------------- parameters
    @functools.cached_property
    def _parameter_counts(self) -> dict[str, float]:
        """Each module's own parameters, computed once (the planner asks thousands of times)."""
        shape = Shape(1, "none", 1, False)
        counts: dict[str, float] = {}
        for module in self.modules:
            if isinstance(module, LMHead):
                counts[module.name] = 0.0 if module.tied_to else float(module.vocab_size * module.hidden_size)
            else:
                counts[module.name] = sum(layer_part(module, shape, index, self.module).params
                                          for index in range(layer_depth(module)))
        return counts

    def _own_parameters(self, module: Module) -> float:
        return self._parameter_counts[module.name]

    def num_parameters(self, module: str | None = None) -> int:
        """Parameter count of the whole model, or of one module (a tied head counts 0)."""
        if module is not None:
            return int(round(self._own_parameters(self.module(module))))
        return int(round(sum(self._own_parameters(m) for m in self.modules)))

    def module_parameters(self) -> dict[str, int]:
        """Parameters per module, in order."""
        return {m.name: self.num_parameters(m.name) for m in self.modules}

    def trainable_parameters(self) -> int:
        """Parameters with gradients and optimizer state (frozen modules excluded)."""
        return sum(count for name, count in self.module_parameters().items() if self.trains(name))

    def module_tokens(self) -> dict[str, int]:
        """Tokens per example each module processes (a vision encoder: its patch tokens)."""
        out: dict[str, int] = {}
        for m in self.modules:
            out[m.name] = m.tokens if hasattr(m, "tokens") and not isinstance(m, Projector) else m.output_shape()[0]
        return out

    def with_frozen(self, frozen: Mapping[str, bool]) -> ModelSpec:
        """A copy with some modules' ``frozen`` flags replaced (``{"vision": True}``)."""
        for name in frozen:
            self.module(name)
        modules = tuple(replace(m, frozen=bool(frozen[m.name])) if m.name in frozen else m for m in self.modules)
        return ModelSpec(self.name, modules, self.description, self.training, self.defaulted, self.assumed)

    # ------------------------------------------------------------ recompute
    def recompute_modes(self, recompute: Recompute | Mapping[str, Recompute]) -> dict[str, Recompute]:
        """The recompute mode of every module: one mode for all, or a mode per module name (others ``"none"``).

        Raises:
            InvalidInputError: an unknown mode or module name.
        """
        if isinstance(recompute, str):
            Shape.checked(1, recompute, 1, False)
            return {module.name: recompute for module in self.modules}
        out: dict[str, Recompute] = {module.name: "none" for module in self.modules}
        for name, mode in recompute.items():
            self.module(name)
            Shape.checked(1, mode, 1, False)
            out[name] = mode
        return out

    def recompute_units(self) -> list[tuple[str, ...]]:
        """The modules whose recompute mode changes a cost (transformer blocks), as pipeline-layer owners.

        A joint pair (``joint_with``) runs as one layer per depth and is one unit:
        ``("llm", "action_expert")``.
        """
        partners = {m.joint_with: m.name for m in self.modules if isinstance(m, TransformerStack) and m.joint_with}
        units: list[tuple[str, ...]] = []
        for module in self.modules:
            if isinstance(module, TransformerStack) and module.joint_with:
                continue
            if isinstance(module, (TransformerStack, VisionEncoder)):
                partner = partners.get(module.name)
                units.append((module.name,) if partner is None else (module.name, partner))
        return units

    # ------------------------------------------------------------------ I/O
    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (the schema :meth:`from_dict` reads)."""
        modules = [module_record(module) for module in self.modules]
        return {"name": self.name, "description": self.description, "modules": modules}

    @classmethod
    def from_dict(cls, payload: Mapping[str, Any], *, base: str | Path = ".", name: str = "model",
                  source: str = "config.json") -> ModelSpec:
        """Build a spec from :meth:`to_dict`'s schema (see docs/presets.md), or from a Hugging Face config.

        A module entry ``{"config": PATH, ...}`` is that part of a ``config.json`` (PATH relative
        to ``base``) with the entry's fields over it; a payload that is itself a ``config.json``
        (``model_type``, no ``modules``) is that model alone, called ``name``
        (:mod:`pipeplan.models.hf_config`; ``source`` names it in messages). What the configs left
        out is :attr:`assumed`.

        Raises:
            InvalidInputError: an unknown ``kind`` or key, a missing field, a bad value; a config
                that is missing, not JSON, of an unknown ``model_type`` or without a required key.
        """
        if is_hf_config(payload):
            payload, assumed = bare_payload(payload, source, name)
            try:
                return cls(name, modules_from_payload(payload), defaulted=reported_defaults(payload), assumed=assumed)
            except InvalidInputError as error:  # a shape the config's defaults made: say the file and the defaults
                raise InvalidInputError(f"config {source!r}, read as a spec: {error} (assumed: "
                                        f"{'; '.join(assumed)})") from None
        if isinstance(payload, Mapping):
            payload, assumed = expand_payload(payload, Path(base), module_from_record)
        else:
            assumed = ()
        modules = modules_from_payload(payload)
        return cls(str(payload.get("name", "model")), modules, str(payload.get("description", "")),
                   defaulted=reported_defaults(payload), assumed=assumed)

    @classmethod
    def from_file(cls, path: str | Path) -> ModelSpec:
        """Load a ``.json`` spec (or ``.yaml`` / ``.yml`` when PyYAML is installed), or a bare ``config.json``.

        Config paths in the spec are read relative to its folder; a bare ``config.json`` is named
        after its folder (``Llama-2-7b-hf/config.json`` → ``Llama-2-7b-hf``).

        Raises:
            InvalidInputError: a missing file, an unknown suffix, unparsable text, or
                a bad spec (see :meth:`from_dict`).
        """
        file = Path(path)
        payload = read_payload(file)
        name = file.parent.name if file.name == "config.json" and file.parent.name else file.stem
        try:
            return cls.from_dict(payload, base=file.parent, name=name, source=str(file))
        except TypeError as error:
            raise InvalidInputError(f"spec file {str(file)!r}: {error}") from None

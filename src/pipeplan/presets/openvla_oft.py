"""OpenVLA-OFT (moojink/openvla-oft): OpenVLA-7B with LoRA, parallel decoding of action chunks and an L1 MLP head.

    from pipeplan.presets.openvla_oft import openvla_oft
    spec = openvla_oft()
    spec.module("action_head").tokens        # 8 chunk steps, each reading 7 × 4096 hidden states

The LIBERO recipe (LIBERO.md: ``--use_l1_regression True --use_film False
--num_images_in_input 2 --use_proprio True``; vla-scripts/finetune.py: ``use_lora=True``,
``lora_rank=32``, ``target_modules="all-linear"``, DDP with ``find_unused=True``, AdamW, no
gradient checkpointing; prismatic/vla/constants.py LIBERO: ``NUM_ACTIONS_CHUNK`` 8,
``ACTION_DIM`` 7, ``PROPRIO_DIM`` 8). prismatic/extern/hf/modeling_prismatic.py: every
image goes through both featurizers (256 patches each), the proprio state is one more
token after the patches (projectors.py ``ProprioProjector`` 8 → 4096 → 4096), and the 56
action positions are empty embeddings decoded in parallel (bidirectionally) in the same
Llama pass; ``labels`` are passed, so the LM head still computes logits on every position
(forward only: only the L1 loss is backpropagated). models/action_heads.py
``L1RegressionActionHead``: an MLPResNet (LayerNorm 28,672, fc1 → 4096, two LayerNorm +
Linear residual blocks, LayerNorm, fc2 → 7) on the 8 chunk steps, each the 7 action
positions' hidden states concatenated. The language part is taken as 33 prompt tokens (an
assumption, OpenVLA's 40 minus its 7 action tokens) + 56 action positions + the stop token.

LoRA cannot be expressed per layer: the base weights are frozen modules (B, no W, no
optimizer state), and the 109,563,904 adapter parameters (rank 32 on every linear of both
towers, their pooling head, the projector and Llama) are held by one ``lora_adapters``
layer in front, which both towers' blocks read so that the frozen layers run their
backward as they do under LoRA (each tower's patch embedding, a conv LoRA does not adapt,
is a separate forward-only layer ``*_patch``). In the reference each Llama layer holds
2.5M of them; their FLOPs (about 1% of the base's) are not counted. As in OpenVLA, the last DINOv2 and SigLIP
blocks run forward only (features from the second-to-last block).
"""

from __future__ import annotations

from dataclasses import replace

from ..models.layer_costs import layer_costs
from ..models.modules import Linear, LMHead, Module, Projector, TransformerStack, VisionEncoder
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from .openvla import _PATCHES, _VOCAB, _vlm

__all__ = ["openvla_oft", "OFT_LORA_PARAMETERS"]

#: peft rank-32 LoRA on every nn.Linear of OpenVLA (target_modules="all-linear"): r · (in + out) each.
OFT_LORA_PARAMETERS = 109_563_904
_CHUNK, _ACTION_DIM, _PROPRIO_DIM, _PROMPT = 8, 7, 8, 33
# Prismatic's training paths (openvla preset) -> the HF OpenVLAForActionPrediction paths OFT fine-tunes
_HF_PATHS = (("vision_backbone.dino_featurizer.", "vision_backbone.featurizer."),
             ("vision_backbone.siglip_featurizer.", "vision_backbone.fused_featurizer."),
             ("llm_backbone.llm.", "language_model."))


def _hf(paths: tuple[str, ...] | None) -> tuple[str, ...] | None:
    if paths is None:
        return None
    renamed = []
    for path in paths:
        for old, new in _HF_PATHS:
            path = path.replace(old, new)
        renamed.append(path)
    return tuple(renamed)


def _frozen_tower(tower: VisionEncoder, cameras: int) -> list[Module]:
    """A LoRA-adapted tower: its patch embedding forward only (a conv: no LoRA), its blocks with B and no W."""
    tower = replace(tower, cameras=cameras)
    patch_params = layer_costs(ModelSpec("tower", (tower,)), 1)[0].params  # + positions, class/registers, MAP head
    pixels = tower.channels * tower.patch_size ** 2
    patch_linear = Linear(pixels, tower.hidden_size, tokens=tower.tokens)
    return [
        Projector(name=f"{tower.name}_patch", inputs=(), tokens=tower.tokens, linears=(patch_linear,),
                  activation=False, frozen=True, extra_params=int(patch_params) - pixels * tower.hidden_size
                  - tower.hidden_size, fqn=_hf(tower.fqn_first)),
        replace(tower.blocks(), frozen=True, inputs=(f"{tower.name}_patch", "lora_adapters"), fqn=_hf(tower.fqn),
                fqn_last=_hf(tower.fqn_last)),
    ]


def _frozen_base(module: Module, cameras: int, sequence: int) -> list[Module]:
    """OpenVLA's ``module`` as OFT runs it: frozen under LoRA, ``cameras`` images, HF module paths."""
    if isinstance(module, VisionEncoder):
        return _frozen_tower(module, cameras)
    changes: dict[str, object] = {key: _hf(getattr(module, key)) for key in ("fqn", "fqn_first", "fqn_last")
                                  if hasattr(module, key)}
    changes["frozen"] = True
    if isinstance(module, TransformerStack) and module.name.endswith("_last"):
        changes["sequences"] = cameras
    elif module.name == "projector":
        changes["tokens"] = cameras * _PATCHES
    elif module.name == "llm":
        changes.update(seq_length=sequence, inputs=("projector", "proprio_projector", "text_embedding"))
    return [replace(module, **changes)]  # type: ignore[arg-type]


def openvla_oft(*, cameras: int = 2, text_tokens: int = _PROMPT + _CHUNK * _ACTION_DIM + 1) -> ModelSpec:
    """OpenVLA-OFT (LIBERO recipe): OpenVLA-7B + 277,499,911 parameters (LoRA, proprio projector, L1 head).

    Args:
        cameras: ``num_images_in_input`` (2: third-person and wrist).
        text_tokens: prompt + 56 action positions + stop (90; the prompt's 33 an assumption).
    """
    sequence = cameras * _PATCHES + 1 + text_tokens  # patches, proprio token, language
    base = [part for module in _vlm(text_tokens=text_tokens) for part in _frozen_base(module, cameras, sequence)]
    width = 4096  # Llama-2 7B
    modules: list[Module] = [
        Projector(name="lora_adapters", inputs=(), tokens=1, bias=False, linears=(Linear(4096, 32),),
                  extra_params=OFT_LORA_PARAMETERS - 4096 * 32, fqn=("*.lora_A.default", "*.lora_B.default")),
        *base[:7],  # both towers (and their forward-only last blocks), the projector
        Projector(name="proprio_projector", inputs=(), tokens=1,
                  linears=(Linear(_PROPRIO_DIM, width), Linear(width, width)), fqn=("proprio_projector",)),
        *base[7:],  # the text embedding and Llama
        LMHead(name="lm_head", vocab_size=_VOCAB, hidden_size=width, tokens=sequence, frozen=True, inputs=(),
               fqn=("language_model.lm_head",), role="loss"),
        Projector(name="action_head", inputs=("llm",), tokens=_CHUNK,
                  linears=(Linear(_ACTION_DIM * width, width), Linear(width, width), Linear(width, width),
                           Linear(width, _ACTION_DIM)),
                  norm_params=2 * _ACTION_DIM * width + 3 * 2 * width, fqn=("action_head.model",)),
    ]
    training = ReferenceTraining(dp_mode="ddp", ema=False, optimizer="adamw", implementation="openvla-oft-hf",
                                 source="openvla-oft vla-scripts/finetune.py (LoRA r=32 all-linear, DDP, AdamW), "
                                        "LIBERO.md, prismatic/extern/hf/modeling_prismatic.py")
    return ModelSpec("openvla-oft", tuple(modules), "moojink/openvla-oft (LIBERO): OpenVLA-7B + LoRA r32, "
                     "parallel decoding of 8 × 7 actions, L1 MLP head", training=training)

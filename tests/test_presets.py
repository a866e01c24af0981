"""Every preset's parameter counts against the published counts (within 1%), with the source."""

from __future__ import annotations

from dataclasses import replace

import pytest

from pipeplan import presets
from pipeplan.errors import InvalidInputError
from pipeplan.models.layer_costs import layer_costs
from pipeplan.models.spec import ModelSpec


def within(value: float, published: float, rel: float = 0.01) -> bool:
    return abs(value - published) <= rel * published


def params(name: str, *modules: str) -> int:
    spec = presets.get(name)
    return sum(spec.num_parameters(m) for m in modules) if modules else spec.num_parameters()


def test_names_and_unknown_preset():
    assert presets.names() == ["pi0", "pi0.5", "pi0-fast", "openvla-7b", "openvla-oft", "gr00t-n1", "gr00t-n1.5",
                               "cogact", "cogact-dit-s", "cogact-dit-l", "rdt-1b", "smolvla", "octo-small",
                               "octo-base", "driving-6cam", "dumbbell", "gpt-1.5b"]
    with pytest.raises(InvalidInputError, match=r"preset must be one of pi0, pi0.5, .*got 'pi1'"):
        presets.get("pi1")


def test_pi0_modules_match_their_sources():
    # Gemma Team 2024, "Gemma: Open Models Based on Gemini Research", Table 2: Gemma 2B has
    # 1,981,884,416 non-embedding parameters (exact).
    assert params("pi0", "llm") == 1_981_884_416
    # openpi src/openpi/models/gemma.py, get_config("gemma_300m"): "# 311M params".
    assert within(params("pi0", "action_expert"), 311e6)
    # timm vit_so400m_patch14_siglip_224 (SigLIP So400m/14): 427.7M parameters, which include the
    # attention-pooling (MAP) head that PaliGemma drops (pool_type="none").
    vision = presets.get("pi0").module("vision")
    assert within(ModelSpec("s", (replace(vision, map_head=True),)).num_parameters(), 427.7e6)
    # google/paligemma-3b-pt-224 (HF model card): 2.92B parameters = SigLIP + projection + Gemma 2B
    # with the 257,152-token PaliGemma vocabulary.
    assert within(params("pi0", "vision", "vision_projector", "text_embedding", "llm"), 2.92e9)
    # Black et al. 2024 (π0) quote "3.3B" = 3B PaliGemma + 300M expert, both rounded; the exact sum
    # of the published parts (2.92B + 311M + the action projections) is 3.24B.
    assert within(params("pi0"), 2.92e9 + 311e6)


def test_pi05_expert_adds_exactly_the_adarms_modulations():
    # openpi gemma.py RMSNorm(cond): Dense(width -> 3 * width) replaces the scale in each of the
    # expert's 2 * 18 block norms and its final norm (pi0.py: use_adarms=[False, True] for pi05).
    width, norms = 1024, 2 * 18 + 1
    delta = params("pi0.5", "action_expert") - params("pi0", "action_expert")
    assert delta == norms * (width * 3 * width + 3 * width - width)
    assert params("pi0.5", "llm") == params("pi0", "llm")
    assert presets.get("pi0.5").module("llm").seq_length == 768 + 200  # max_token_len = 200 for pi05


def test_openvla_matches_its_sources():
    # openvla/openvla-7b (HF model card): 7,541,237,184 parameters (7.54B).
    assert within(params("openvla-7b"), 7_541_237_184)
    # timm vit_large_patch14_reg4_dinov2.lvd142m: 304.4M at 518 px; at 224 px the position table
    # has 256 instead of 1369 rows (1.14M fewer).
    # (The tower's last block and final norm are a separate forward-only module, see openvla.py.)
    assert within(params("openvla-7b", "dinov2", "dinov2_last"), 304.4e6)
    assert within(params("openvla-7b", "siglip", "siglip_last"), 427.7e6)  # timm vit_so400m_patch14_siglip_224
    # Llama-2 7B (Touvron et al. 2023; HF meta-llama/Llama-2-7b-hf): 6,738,415,616 parameters with a
    # 32,000 vocabulary; Prismatic pads to 32,064 rows in the embedding and the head.
    llama = params("openvla-7b", "text_embedding", "llm", "lm_head")
    assert llama - 2 * 64 * 4096 == 6_738_415_616


def test_cogact_action_model_matches_the_paper():
    # Li et al. 2024 (CogACT), action-module scaling: DiT-Base has 89M parameters.
    assert within(params("cogact", "action_embedding", "action_dit", "action_output"), 89e6)
    assert presets.get("cogact").module("action_dit").repeats == 8  # scripts/train.py repeated_diffusion_steps
    vlm = ("dinov2", "dinov2_last", "siglip", "siglip_last", "projector", "text_embedding", "llm", "lm_head")
    assert params("cogact", *vlm) == params("openvla-7b", *vlm)  # CogACT keeps Llama's LM head (issue 22)


def test_gr00t_matches_the_paper():
    # NVIDIA 2025, "GR00T N1" §2: "GR00T-N1-2B has 2.2B parameters in total, with 1.34B in the VLM".
    assert within(params("gr00t-n1"), 2.2e9)
    assert within(params("gr00t-n1", "vision", "vision_projector", "text_embedding", "llm", "vlm_projection"),
                  1.34e9)
    # SmolLM2-1.7B blocks (Eagle-2 llm_config: 2048 wide, 24 layers, MHA, SwiGLU 8192): GR00T keeps 12.
    assert params("gr00t-n1", "llm") == 12 * (4 * 2048**2 + 3 * 2048 * 8192 + 2 * 2048) + 2048


def test_gpt_1_5b_matches_narayanan_formula():
    # Narayanan et al. 2021, eq. 2's parameter count P = 12 l h^2 (1 + 13 / (12 h) + (V + s) / (12 l h))
    # (biases, LayerNorms, tied embedding, learned positions); the zero-bubble paper calls it 1.5B.
    l, h, V, s = 22, 2304, 50_304, 1024
    expected = 12 * l * h * h * (1 + 13 / (12 * h) + (V + s) / (12 * l * h))
    assert params("gpt-1.5b") == pytest.approx(expected + 2 * h, abs=1)  # + the final LayerNorm
    assert within(params("gpt-1.5b"), 1.5e9, rel=0.015)


def test_driving_policy_components_match_their_sources():
    # openai/clip-vit-large-patch14-336: a 304M vision tower; Llama-2 7B as above (32,000 vocabulary).
    assert within(params("driving-6cam", "vision"), 304e6)
    assert params("driving-6cam", "text_embedding", "llm") + 32_000 * 4096 == 6_738_415_616
    spec = presets.get("driving-6cam")
    assert spec.module("vision").frozen and not spec.trains("vision")


def test_dumbbell_reproduces_lesson_16_ratios():
    # Lesson 16: vision 16 ms, 32 layers at 2 ms, action head 8 ms -> vision = 8 layers, head = 4 layers.
    spec = presets.get("dumbbell")
    flops = {}
    for cost in layer_costs(spec, 1):
        if cost.name.startswith(("vision.", "llm.", "action_head.")) and cost.name != "vision.0":
            flops.setdefault(cost.modules[0], []).append(cost.forward_flops)
    layer = flops["llm"][0]
    assert len(flops["llm"]) == 32 and sum(flops["vision"]) == 8 * layer and sum(flops["action_head"]) == 4 * layer

"""Published building blocks shared by several presets (each with its source).

    from pipeplan.presets._components import siglip_so400m, gemma
    vision = siglip_so400m("vision", cameras=3)
    llm = gemma("llm", "gemma_2b", seq_length=816)
"""

from __future__ import annotations

from typing import Any

from ..models.modules import TransformerStack, VisionEncoder

__all__ = ["siglip_so400m", "dinov2_large", "clip_large_336", "gemma", "llama2_7b_blocks", "GEMMA"]

#: Gemma variants as openpi configures them (openpi src/openpi/models/gemma.py, get_config).
GEMMA: dict[str, dict[str, int]] = {
    "gemma_2b": {"hidden_size": 2048, "num_layers": 18, "ffn_hidden_size": 16_384, "num_heads": 8,
                 "num_kv_heads": 1, "head_dim": 256},
    "gemma_300m": {"hidden_size": 1024, "num_layers": 18, "ffn_hidden_size": 4096, "num_heads": 8,
                   "num_kv_heads": 1, "head_dim": 256},
}


def siglip_so400m(name: str, *, cameras: int = 1, image_size: int = 224, num_layers: int = 27,
                  **options: Any) -> VisionEncoder:
    """SigLIP So400m/14: width 1152, depth 27, MLP 4304, 16 heads, patch 14.

    Source: openpi src/openpi/models/siglip.py (``decode_variant("So400m/14")``) and
    the HF ``siglip_vision_model`` config in Isaac-GR00T's Eagle-2 config.json.
    """
    return VisionEncoder(name=name, image_size=image_size, patch_size=14, num_layers=num_layers, hidden_size=1152,
                         num_heads=16, ffn_hidden_size=4304, cameras=cameras, **options)


def dinov2_large(name: str, *, image_size: int = 224, num_layers: int = 24, **options: Any) -> VisionEncoder:
    """DINOv2 ViT-L/14 with 4 registers (timm ``vit_large_patch14_reg4_dinov2.lvd142m``).

    Width 1024, depth 24, 16 heads, MLP 4096, LayerScale, a class token and 4
    registers; OpenVLA/Prismatic runs it at 224 px (256 patches).
    """
    return VisionEncoder(name=name, image_size=image_size, patch_size=14, num_layers=num_layers, hidden_size=1024,
                         num_heads=16, ffn_hidden_size=4096, extra_tokens=5, layer_scale=True, **options)


def clip_large_336(name: str, *, cameras: int = 1, **options: Any) -> VisionEncoder:
    """CLIP ViT-L/14 at 336 px (``openai/clip-vit-large-patch14-336``, LLaVA-1.5's tower).

    Width 1024, depth 24, 16 heads, MLP 4096, a class token, 577 position
    embeddings, a pre- and a post-LayerNorm (counted as the final norm here).
    """
    return VisionEncoder(name=name, image_size=336, patch_size=14, num_layers=24, hidden_size=1024,
                         num_heads=16, ffn_hidden_size=4096, cameras=cameras, extra_tokens=1,
                         position_tokens=577, **options)


def gemma(name: str, variant: str, *, seq_length: int, **options: Any) -> TransformerStack:
    """A Gemma decoder stack (gated GeLU MLP, RMSNorm, no biases, final norm)."""
    return TransformerStack(name=name, seq_length=seq_length, gated_mlp=True, norm="rmsnorm",
                            final_norm=True, **GEMMA[variant], **options)  # type: ignore[arg-type]


def llama2_7b_blocks(name: str, *, seq_length: int, **options: Any) -> TransformerStack:
    """Llama-2 7B's 32 decoder blocks: h 4096, 32 heads, SwiGLU 11008, RMSNorm, final norm.

    Source: meta-llama/Llama-2-7b-hf config.json; Touvron et al. 2023.
    """
    return TransformerStack(name=name, num_layers=32, hidden_size=4096, num_heads=32, seq_length=seq_length,
                            ffn_hidden_size=11_008, gated_mlp=True, norm="rmsnorm", final_norm=True, **options)

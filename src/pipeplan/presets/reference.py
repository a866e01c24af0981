"""Reference shapes: the zero-bubble paper's 1.5B GPT, lesson 16's dumbbell, a 6-camera driving policy.

    from pipeplan.presets.reference import gpt_1_5b, dumbbell, driving_6cam
    driving_6cam().module("vision").tokens      # 3456 = 6 cameras × (336 / 14)²

* ``gpt-1.5b``: Qi et al. 2023, "Zero Bubble Pipeline Parallelism", Table 3:
  1.5B model, 22 layers, 24 heads, hidden 2304, sequence 1024 (Megatron-LM GPT:
  LayerNorm, biases, dropout, learned positions, GPT-2 vocabulary 50,257 padded to
  50,304, tied output layer).
* ``dumbbell``: lesson 16 (seed 000) in shapes: a 32-layer LLM whose vision
  encoder costs 8 LLM layers (the lesson's 16 ms at 2 ms a layer) and whose action
  head costs 4 (8 ms). The blocks share one shape, so the ratios are exact up to
  the patch embedding and the output projection. Synthetic: no published count.
* ``driving-6cam``: lesson 16's figure: 6 cameras × (336 / 14)² = 3456 patch
  tokens. Components are published, the composition is illustrative: CLIP
  ViT-L/14-336 (frozen, as LLaVA-1.5 trains it), the LLaVA-1.5 two-layer GELU
  projector, Llama-2 7B blocks over 3456 + 64 tokens, and a DiT-B-sized
  flow-matching head (12 × 768) cross-attending to the LLM output on every block.
"""

from __future__ import annotations

from ..models.modules import CrossAttention, Embedding, Linear, LMHead, Module, Projector, TransformerStack, VisionEncoder
from ..models.spec import ModelSpec
from ..models.training import ReferenceTraining
from ._components import clip_large_336, llama2_7b_blocks

__all__ = ["ZERO_BUBBLE_MODELS", "gpt_1_5b", "zero_bubble_gpt", "dumbbell", "driving_6cam"]


#: Qi et al. 2024, "Zero Bubble Pipeline Parallelism" (ICLR), Table 3: layers, attention heads,
#: hidden size, and the GPUs (= pipeline stages) and micro-batch size its experiments use.
ZERO_BUBBLE_MODELS: dict[str, tuple[int, int, int, int, int]] = {
    "1.5b": (22, 24, 2304, 8, 6),
    "6.2b": (30, 32, 4096, 8, 3),
    "14.6b": (46, 40, 5120, 16, 1),
    "28.3b": (62, 48, 6144, 32, 1),
}


def zero_bubble_gpt(size: str, *, num_layers: int | None = None, seq_length: int = 1024,
                    vocab_size: int = 50_304) -> ModelSpec:
    """One of the zero-bubble paper's GPTs (``size`` a key of :data:`ZERO_BUBBLE_MODELS`), Megatron-LM layout.

    The paper does not state the vocabulary; the default is GPT-2's 50,257 padded to
    50,304 (Megatron pads to a multiple of 128).
    """
    layers, heads, hidden = ZERO_BUBBLE_MODELS[size][:3]
    vocab = vocab_size
    modules: list[Module] = [
        Embedding(name="embedding", vocab_size=vocab, hidden_size=hidden, tokens=seq_length,
                  position_tokens=seq_length, dropout=True, role="embedding",
                  fqn=("embedding.word_embeddings", "embedding.position_embeddings")),
        TransformerStack(name="layers", num_layers=num_layers or layers, hidden_size=hidden, num_heads=heads,
                         seq_length=seq_length, ffn_hidden_size=4 * hidden, bias=True, dropout=True,
                         causal=True, final_norm=True, fqn=("decoder.layers.{i}",), role="decoder"),
        # Megatron's loss "layer" (--account-for-loss-in-pipeline-split) is the final norm and the
        # output layer; pipeplan charges the final norm's 2h parameters to the last decoder layer.
        LMHead(name="output_layer", vocab_size=vocab, hidden_size=hidden, tokens=seq_length, tied_to="embedding",
               fqn=("decoder.final_layernorm", "output_layer"), role="loss"),
    ]
    # Megatron-LM megatron/core/models/gpt/gpt_model.py (GPTModel: embedding, decoder, output_layer)
    training = ReferenceTraining(implementation="megatron-gpt", dp_mode="ddp",
                                 source="Megatron-LM megatron/core/models/gpt/gpt_model.py")
    return ModelSpec(f"gpt-{size}", tuple(modules), f"Zero Bubble PP (Qi et al. 2023) Table 3: {size.upper()} GPT",
                     training=training)


def gpt_1_5b(*, num_layers: int = 22, seq_length: int = 1024) -> ModelSpec:
    """The zero-bubble paper's 1.5B GPT (Megatron-LM layout), 1.52B parameters."""
    return zero_bubble_gpt("1.5b", num_layers=num_layers, seq_length=seq_length)


def dumbbell() -> ModelSpec:
    """Lesson 16's dumbbell: vision = 8 LLM layers, 32 LLM layers, action head = 4 LLM layers."""
    hidden, heads, seq, ffn = 2048, 16, 1024, 8192
    block = {"hidden_size": hidden, "num_heads": heads, "seq_length": seq, "ffn_hidden_size": ffn}
    modules: list[Module] = [
        VisionEncoder(name="vision", image_size=448, patch_size=14, num_layers=8, hidden_size=hidden,
                      num_heads=heads, ffn_hidden_size=ffn, bias=False, final_norm=False),
        TransformerStack(name="llm", num_layers=32, **block),  # type: ignore[arg-type]
        TransformerStack(name="action_head", num_layers=4, **block),  # type: ignore[arg-type]
        Projector(name="action_output", linears=(Linear(hidden, 7),), tokens=seq),
    ]
    return ModelSpec("dumbbell", tuple(modules), "lesson 16 (seed 000): vision 16 ms, 32 × 2 ms, head 8 ms")


def driving_6cam() -> ModelSpec:
    """A 6-camera driving VLA: frozen CLIP-L/336 × 6 (3456 tokens), Llama-2 7B, a DiT-B action head."""
    vision = clip_large_336("vision", cameras=6, frozen=True)
    text, width, waypoints = 64, 768, 16
    seq = vision.tokens + text
    modules: list[Module] = [
        vision,
        Projector(name="projector", tokens=vision.tokens, linears=(Linear(1024, 4096), Linear(4096, 4096))),
        Embedding(name="text_embedding", vocab_size=32_000, hidden_size=4096, tokens=text),
        llama2_7b_blocks("llm", seq_length=seq, inputs=("projector", "text_embedding")),
        Projector(name="action_embedding", inputs=(), tokens=waypoints, output_tokens=waypoints + 1,
                  output_width=width, linears=(Linear(3, width), Linear(256, width, tokens=1),
                                               Linear(width, width, tokens=1))),
        TransformerStack(name="action_head", num_layers=12, hidden_size=width, num_heads=12,
                         seq_length=waypoints + 1, ffn_hidden_size=4 * width, bias=True,
                         cross_attention=CrossAttention("llm", kv_hidden_size=4096)),
        Projector(name="action_output", linears=(Linear(width, 3),), tokens=waypoints),
    ]
    return ModelSpec("driving-6cam", tuple(modules), "lesson 16's 6-camera policy: CLIP-L/336 ×6 + Llama-2 7B + DiT-B")

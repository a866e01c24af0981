"""Specs from Hugging Face config.json files: published counts, the presets' backbones, plans, exports, bad input.

The fixtures under tests/fixtures/hf/ are the published config.json files of the checkpoints
(tests/fixtures/hf/README.md names each source); nothing is downloaded.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pipeplan import presets
from pipeplan.engines import layer_names_in_reference
from pipeplan.errors import InvalidInputError
from pipeplan.models.hf_config import SUPPORTED, config_parts, read_config
from pipeplan.models.schema_docs import model_defaults
from pipeplan.models.spec import ModelSpec

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "fixtures" / "hf"
EXAMPLE = ROOT / "examples" / "vla_from_configs.json"


def bare(name: str) -> ModelSpec:
    return ModelSpec.from_file(HF / name / "config.json")


def spec_of(tmp_path: Path, *modules: dict[str, Any]) -> ModelSpec:
    """A spec file in ``tmp_path`` whose entries name fixtures by a path relative to it."""
    (tmp_path / "hf").symlink_to(HF)
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"name": "s", "modules": list(modules)}))
    return ModelSpec.from_file(path)


def non_embedding(spec: ModelSpec) -> int:
    return spec.num_parameters() - spec.num_parameters("text_embedding") - spec.num_parameters("lm_head")


# --------------------------------------------------------------------------- published counts
def test_llama_2_7b_has_its_published_count_and_hf_paths():
    # Touvron et al. 2023 (Llama 2) and meta-llama/Llama-2-7b-hf: 6,738,415,616 parameters (untied head)
    spec = bare("Llama-2-7b-hf")
    assert spec.num_parameters() == 6_738_415_616
    assert [name.fqns for name in layer_names_in_reference(spec)][:2] == [("model.embed_tokens",), ("model.layers.0",)]
    assert layer_names_in_reference(spec)[-1].fqns == ("lm_head",)
    assert layer_names_in_reference(spec)[-2].fqns == ("model.layers.31", "model.norm")
    llm = spec.module("llm")
    assert llm.seq_length == 4096 and llm.causal and llm.gated_mlp and llm.norm == "rmsnorm"  # type: ignore[union-attr]


def test_qwen2_5_0_5b_counts_its_qkv_biases():
    # Qwen2.5 model card (Qwen/Qwen2.5-0.5B): 0.49B parameters, 0.36B non-embedding; tied embeddings
    spec = bare("Qwen2.5-0.5B")
    assert round(spec.num_parameters() / 1e9, 2) == 0.49 and round(non_embedding(spec) / 1e9, 2) == 0.36
    assert spec.num_parameters("lm_head") == 0 and spec.module("lm_head").tied_to == "text_embedding"  # type: ignore[union-attr]
    # Qwen2Attention: q/k/v with biases (896 + 2 · 128), o_proj and the MLP without
    h, layers = 896, 24
    block = 2 * h * h + 2 * h * 128 + (h + 2 * 128) + 3 * h * 4864 + 2 * h
    assert spec.num_parameters("llm") == layers * block + h
    assert spec.num_parameters() == 494_032_768


def test_qwen3_0_6b_counts_its_qk_norms():
    # Qwen3 model card (Qwen/Qwen3-0.6B): 0.6B parameters, 0.44B non-embedding; head_dim 128 (q width 2048 > 1024)
    spec = bare("Qwen3-0.6B")
    assert round(spec.num_parameters() / 1e9, 1) == 0.6 and round(non_embedding(spec) / 1e9, 2) == 0.44
    h, q, kv = 1024, 16 * 128, 8 * 128
    assert spec.num_parameters("llm") == 28 * (2 * h * q + 2 * h * kv + 3 * h * 3072 + 2 * h + 2 * 128) + h


def test_gemma_and_gemma_2_match_their_reports():
    # Gemma Team 2024, Table 2: Gemma 2B has 1,981,884,416 non-embedding parameters (the HF table: 256,000 rows)
    gemma = bare("gemma-2b")
    assert gemma.num_parameters("llm") == 1_981_884_416
    assert gemma.num_parameters() == 1_981_884_416 + 256_000 * 2048
    # Gemma Team 2024 (Gemma 2), Table 1: 2B has 2,024,517,888 non-embedding parameters (four norms per block)
    gemma2 = bare("gemma-2-2b")
    assert gemma2.num_parameters("llm") == 2_024_517_888
    assert gemma2.module("llm").post_norms and not gemma.module("llm").post_norms  # type: ignore[union-attr]
    assert "tie_word_embeddings = true" in model_defaults(gemma)  # left out of gemma-2b's file: GemmaConfig's


def test_paligemma_is_the_published_3b_and_pi0_fast_backbone():
    # keras-hub pali_gemma_3b_224 metadata: 2,923,335,408 parameters with the 257,152-token vocabulary;
    # the HF config's table has 257,216 rows (64 more)
    spec = bare("paligemma-3b-pt-224")
    assert spec.num_parameters() == 2_923_335_408 + 64 * 2048
    assert spec.module("vision").tokens == 256 and not spec.module("llm").causal  # type: ignore[union-attr]
    fast = presets.get("pi0-fast")
    counts = spec.module_parameters()
    assert counts["text_embedding"] - 64 * 2048 == fast.num_parameters("text_embedding")
    for mine, theirs in (("vision", "vision"), ("projector", "vision_projector"), ("llm", "llm")):
        assert counts[mine] == fast.num_parameters(theirs)


def test_siglip_so400m_384_reads_whole_patches_and_its_head():
    # timm vit_so400m_patch14_siglip_224: 427.7M with the pooling head (tests/test_presets.py); at 384 px the
    # stride-14 convolution sees 27 × 27 patches: 473 more position rows than at 224
    spec = bare("siglip-so400m-patch14-384")
    vision = spec.module("vision")
    assert vision.image_size == 378 and vision.tokens == 729 and vision.map_head  # type: ignore[union-attr]
    assert round(spec.num_parameters() / 1e6, 1) == round(427.7 + (729 - 256) * 1152 / 1e6, 1) == 428.2
    assert any("image_size 384 is read as 378" in text for text in spec.assumed)
    assert layer_names_in_reference(spec)[0].fqns == ("vision_model.embeddings", "vision_model.head")


def test_dinov2_large_counts_class_mask_tokens_and_positions_at_518():
    # facebook/dinov2-large: 304M parameters (timm vit_large_patch14_dinov2.lvd142m: 304.4M at 518 px)
    spec = bare("dinov2-large")
    h = 1024
    block = 4 * h * h + 4 * h + 2 * h * 4096 + 4096 + h + 4 * h + 2 * h  # LayerScale: 2h
    embeddings = (14 * 14 * 3 * h + h) + (37 * 37 + 1) * h + h + h  # patches, positions, cls, mask token
    assert spec.num_parameters() == 24 * block + embeddings + 2 * h == 304_368_640
    assert round(spec.num_parameters() / 1e6, 1) == 304.4
    assert spec.module("vision").tokens == 37 * 37  # type: ignore[union-attr]
    assert [n.fqns for n in layer_names_in_reference(spec)][-1] == ("encoder.layer.23", "layernorm")


def test_smolvlm2_500m_and_smolvla_share_the_backbone(tmp_path):
    # HuggingFaceTB/SmolVLM2-500M-Video-Instruct: 507M parameters (model page); the untied lm_head included
    spec = bare("SmolVLM2-500M-Video-Instruct")
    assert spec.num_parameters() == 507_482_304
    assert spec.module("projector").tokens == 64  # 1024 patches / pixel shuffle 4²  # type: ignore[union-attr]
    # SmolVLA keeps the first 16 of the 32 text layers (num_vlm_layers) and freezes the VLM
    config = "hf/SmolVLM2-500M-Video-Instruct/config.json"
    prefix = "model.vlm_with_expert.vlm."
    vla = spec_of(tmp_path,
                  {"config": config, "kind": "vision_encoder", "cameras": 3, "frozen": True, "fqn_prefix": prefix},
                  {"config": config, "kind": "projector", "name": "connector", "frozen": True,
                   "fqn_prefix": prefix},
                  {"config": config, "kind": "embedding", "tokens": 48, "frozen": True, "fqn_prefix": prefix},
                  {"config": config, "kind": "transformer", "num_layers": 16, "frozen": True,
                   "inputs": ["connector", "text_embedding"], "fqn_prefix": prefix},
                  {"config": config, "kind": "lm_head", "tokens": 1, "frozen": True, "inputs": [],
                   "fqn_prefix": "model.vlm_with_expert.vlm."})
    smolvla = presets.get("smolvla")
    assert {name: count for name, count in vla.module_parameters().items()} == {
        name: smolvla.num_parameters(name) for name in vla.module_parameters()}
    assert vla.module("connector").tokens == 3 * 64  # type: ignore[union-attr]
    for module in vla.modules:  # the same module paths as the preset's
        theirs = smolvla.module(module.name)
        for key in ("fqn", "fqn_first", "fqn_last"):
            assert getattr(module, key, None) == getattr(theirs, key, None), (module.name, key)


def test_openvla_llama_backbone_from_the_llama_config(tmp_path):
    # Prismatic pads Llama 2's vocabulary to 32,064 rows; the rest is Llama-2-7b-hf's config
    config = "hf/Llama-2-7b-hf/config.json"
    spec = spec_of(tmp_path,
                   {"config": config, "kind": "embedding", "tokens": 296, "vocab_size": 32_064},
                   {"config": config, "seq_length": 296},
                   {"config": config, "kind": "lm_head", "tokens": 40, "vocab_size": 32_064})
    openvla = presets.get("openvla-7b")
    assert spec.module_parameters() == {name: openvla.num_parameters(name)
                                        for name in ("text_embedding", "llm", "lm_head")}


def test_pi0_example_matches_the_preset_count_and_paths():
    # the docs' example: π0 written from PaliGemma's and Gemma's config.json files (openpi's vocabulary)
    spec = ModelSpec.from_file(EXAMPLE)
    pi0 = presets.get("pi0")
    assert spec.module_parameters() == pi0.module_parameters()
    assert spec.num_parameters() == 3_238_048_528
    assert layer_names_in_reference(spec) == layer_names_in_reference(pi0)
    assert spec.module("llm").seq_length == 3 * 256 + 48  # type: ignore[union-attr]  # inferred from its inputs
    assert any(text.startswith("llm: seq_length = 816") for text in spec.assumed)
    for name in ("paligemma-3b-pt-224", "gemma-2b"):  # the example's configs are the fixtures
        assert (ROOT / "examples" / "hf" / name / "config.json").read_bytes() == (HF / name / "config.json").read_bytes()


# --------------------------------------------------------------------------- defaults, overrides
def test_left_out_keys_take_hf_defaults_and_are_listed():
    base = {"model_type": "llama", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 1024, "vocab_size": 1000}
    parts = config_parts(base, "c.json")
    assert parts.records["transformer"]["num_kv_heads"] == 8 and parts.records["transformer"]["head_dim"] == 64
    assert "num_key_value_heads = 8 (= num_attention_heads)" in parts.assumed["transformer"][0]
    assert not parts.tied and "LlamaConfig" in parts.assumed["transformer"][0]
    qwen = config_parts({**base, "model_type": "qwen2"}, "c.json")
    assert qwen.records["transformer"]["num_kv_heads"] == 32  # Qwen2Config's default is 32, not the heads
    given = config_parts({**base, "num_key_value_heads": 2, "head_dim": 64, "attention_bias": False,
                          "mlp_bias": False, "attention_dropout": 0.0, "tie_word_embeddings": True,
                          "_attn_implementation": "eager"}, "c.json")
    assert given.assumed["transformer"] == () and given.tied
    assert given.records["transformer"]["attention"] == "eager"


def test_a_bare_config_plans_alone_and_entries_override(tmp_path):
    spec = spec_of(tmp_path, {"config": "hf/gemma-2b/config.json", "kind": "embedding", "tokens": 100},
                   {"config": "hf/gemma-2b/config.json", "num_layers": 2, "frozen": True},
                   {"config": "hf/gemma-2b/config.json", "kind": "lm_head", "tokens": 100})
    assert spec.module("llm").num_layers == 2 and spec.module("llm").seq_length == 100  # type: ignore[union-attr]
    assert not spec.trains("llm") and spec.module("lm_head").tied_to == "text_embedding"  # type: ignore[union-attr]
    assert spec.defaulted == {}  # every field the cost depends on came from the config or the entry


@pytest.mark.parametrize("entry, message", [
    ({"config": "hf/none/config.json", "kind": "embedding", "tokens": 4}, r"config file '.*none/config.json' does not exist"),
    ({"config": "hf/paligemma-3b-pt-224/config.json"}, r"paligemma config holds several parts; give kind"),
    ({"config": "hf/dinov2-large/config.json", "kind": "transformer"}, r"not a part of the dinov2 config"),
    ({"config": "hf/gemma-2b/config.json", "kind": "embedding"}, r"lacks tokens: a config.json gives shapes"),
    ({"config": "hf/gemma-2b/config.json", "kind": "lm_head", "tokens": 3}, r"ties the head to the embedding"),
    ({"config": 3, "kind": "embedding"}, r"modules\[0\].config must be the path of a config.json"),
    ({"config": "hf/gemma-2b/config.json", "tokens": 3}, r"a transformer's tokens are its seq_length"),
    ({"config": "hf/dinov2-large/config.json", "tokens": 3}, r"a vision tower's tokens follow from image_size"),
    ({"config": "hf/gemma-2b/config.json", "fqn_prefix": 1, "seq_length": 3}, r"fqn_prefix must be a string"),
    ({"config": "hf/gemma-2b/config.json", "seq_length": 3, "num_layer": 2}, r"unknown keys \['num_layer'\]"),
])
def test_bad_config_entries_are_one_line(tmp_path, entry, message):
    with pytest.raises(InvalidInputError, match=message):
        spec_of(tmp_path, entry)


@pytest.mark.parametrize("text, message", [
    ("not json", r"is not valid JSON"),
    ('{"model_type": "bert", "hidden_size": 8}', r"model_type 'bert' is not one pipeplan reads; supported: dinov2, "),
    ('{"model_type": "llama", "hidden_size": 8, "num_attention_heads": 2, "intermediate_size": 8, '
     '"vocab_size": 10}', r"\(model_type llama\) lacks num_hidden_layers, which every llama config states"),
    ('{"model_type": "llama", "hidden_size": "8"}', r"hidden_size must be an integer >= 1, got '8'"),
    ('{"model_type": "paligemma", "text_config": {}}', r"lacks vision_config"),
])
def test_bad_configs_are_one_line_and_exit_2(run_cli, tmp_path, text, message):
    path = tmp_path / "config.json"
    path.write_text(text)
    status, out, err = run_cli("plan", "--spec", str(path), "--gpus", "8", "--global-batch", "64")
    assert status == 2 and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    with pytest.raises(InvalidInputError, match=message):
        ModelSpec.from_file(path)


def test_every_supported_type_is_read():
    lm = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
          "vocab_size": 100, "num_key_value_heads": 2}
    vision = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128,
              "patch_size": 16, "image_size": 64}
    for model_type in SUPPORTED:
        if model_type in ("paligemma", "idefics3", "smolvlm", "siglip"):
            config = {"model_type": model_type, "vision_config": vision, "text_config": lm}
        else:
            config = {"model_type": model_type, **(vision if "siglip" in model_type or "vision" in model_type
                                                   or model_type.startswith("dinov2") else lm)}
        spec = ModelSpec.from_dict(config, name=model_type)
        assert spec.num_parameters() > 0, model_type


# --------------------------------------------------------------------------- the CLI
def test_plan_and_torch_export_of_the_example_name_the_real_paths(run_cli, tmp_path):
    status, out, err = run_cli("plan", "--spec", str(EXAMPLE), "--gpus", "8", "--global-batch", "64", "--json")
    assert status == 0, err
    defaults = json.loads(out)["assumptions"]["model defaults"]
    assert "from config.json: " in defaults and "llm: seq_length = 816" in defaults
    status, out, err = run_cli("plan", "--spec", str(EXAMPLE), "--gpus", "8", "--global-batch", "64", "--pp", "2",
                               "--export", "torch", "--out", str(tmp_path / "out"))
    assert status == 0, err
    text = (tmp_path / "out" / "split_spec.py").read_text()
    for path in ("paligemma_with_expert.paligemma.model.vision_tower.vision_model.encoder.layers.0",
                 "paligemma_with_expert.paligemma.model.language_model.layers.17",
                 "paligemma_with_expert.gemma_expert.model.layers.17", "action_out_proj"):
        assert f'"{path}"' in text


def test_plan_takes_a_bare_config(run_cli):
    status, out, err = run_cli("plan", "--spec", str(HF / "Qwen2.5-0.5B" / "config.json"), "--gpus", "8",
                               "--global-batch", "64", "--json")
    assert status == 0, err
    payload = json.loads(out)
    assert "4096 tokens per example (max_position_embeddings 32768" in payload["assumptions"]["model defaults"]


def test_a_bare_config_whose_defaults_do_not_fit_names_the_file(tmp_path):
    path = tmp_path / "config.json"  # GemmaConfig's 16 KV heads do not divide 4 heads
    path.write_text(json.dumps({"model_type": "gemma", "hidden_size": 64, "num_hidden_layers": 2,
                                "num_attention_heads": 4, "intermediate_size": 128, "vocab_size": 100}))
    with pytest.raises(InvalidInputError, match=r"config '.*config.json', read as a spec: .*num_kv_heads = 16 must "
                                                r"divide num_heads = 4 \(assumed: num_key_value_heads = 16"):
        ModelSpec.from_file(path)


def test_read_config_refuses_a_list(tmp_path):
    path = tmp_path / "c.json"
    path.write_text("[1]")
    with pytest.raises(InvalidInputError, match="must hold a JSON object, got list"):
        read_config(path)


# --------------------------------------------------------------------------- the fields the readers need
def test_qkv_bias_qk_norm_and_post_norms_cost_what_they_add():
    from dataclasses import replace

    from pipeplan.models.layer_costs import layer_costs
    from pipeplan.models.modules import TransformerStack

    base = TransformerStack(name="llm", num_layers=1, hidden_size=512, num_heads=8, num_kv_heads=2, seq_length=64,
                            ffn_hidden_size=1024, gated_mlp=True, norm="rmsnorm", attention="flash")
    q, kv = 512, 2 * 64

    def cost(**fields: Any) -> Any:
        return layer_costs(ModelSpec("m", (replace(base, **fields),)), 1)[0]

    plain = cost()
    assert cost(qkv_bias=True).params - plain.params == q + 2 * kv  # q/k/v only, no o_proj or MLP bias
    assert cost(qkv_bias=True, bias=True).params == cost(bias=True).params  # bias covers every linear
    assert [op.name for op in cost(qkv_bias=True).weight_grad_ops if op.name.endswith("bgrad")] == ["qkv.bgrad"]
    assert cost(qk_norm=True).params - plain.params == 2 * 64  # one RMSNorm scale over head_dim for q, one for k
    assert "qk_norm" in [op.name for op in cost(qk_norm=True).forward_ops]
    assert cost(qk_norm=True).activation_bytes - plain.activation_bytes == 2 * 64 * (q + kv)  # q, k before norms
    assert cost(post_norms=True).params - plain.params == 2 * 512
    names = [op.name for op in cost(post_norms=True).forward_ops]
    assert names.index("post_attention_norm") < names.index("residual1") and "post_mlp_norm" in names
    assert cost(post_norms=True).activation_bytes - plain.activation_bytes == 2 * 2 * 64 * 512


def test_dinov2_with_registers_counts_its_registers():
    config = json.loads((HF / "dinov2-large" / "config.json").read_text())
    plain = ModelSpec.from_dict(config, name="d")
    registers = ModelSpec.from_dict({**config, "model_type": "dinov2_with_registers"}, name="r")
    assert registers.num_parameters() - plain.num_parameters() == 4 * 1024  # Dinov2WithRegistersConfig: 4
    assert registers.module("vision").extra_tokens == 5  # type: ignore[union-attr]  # class + registers
    assert "num_register_tokens = 4" in " ".join(registers.assumed)

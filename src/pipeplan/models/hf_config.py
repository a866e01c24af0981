"""Hugging Face ``config.json`` files as pipeplan modules: the parts a VLA is built from, with their real paths.

    >>> from pipeplan.models.hf_config import config_parts
    >>> parts = config_parts({"model_type": "llama", "hidden_size": 4096, "num_hidden_layers": 32,
    ...                       "num_attention_heads": 32, "intermediate_size": 11008, "vocab_size": 32000},
    ...                      "config.json")
    >>> sorted(parts.records), parts.records["transformer"]["fqn"]
    (['embedding', 'lm_head', 'transformer'], ['model.layers.{i}'])
    >>> print(parts.assumed["transformer"][0])
    num_key_value_heads = 32 (= num_attention_heads), head_dim = 128 (= hidden_size / num_attention_heads), ...

A config is read by its ``model_type`` (:data:`SUPPORTED`): the decoder LMs ``llama``,
``mistral``, ``qwen2``, ``qwen3``, ``gemma``, ``gemma2``; the vision towers
``siglip_vision_model`` (and ``siglip``: its ``vision_config``), ``dinov2`` (and
``dinov2_with_registers``),
``idefics3_vision`` / ``smolvlm_vision``; the VLMs ``paligemma`` (``vision_config`` +
``text_config``) and ``idefics3`` / ``smolvlm``. Each gives module *records* (the file
schema of :mod:`pipeplan.models._schema`, token counts left to the spec) by kind:
``vision_encoder``, ``projector``, ``embedding``, ``transformer``, ``lm_head``. Shapes are
exact: gated MLPs, RMSNorm or LayerNorm, grouped KV heads, ``head_dim``, biases (Qwen2's
q/k/v only), Qwen3's q/k norms, Gemma 2's four norms per block, tied heads, SigLIP's
pooling head, DINOv2's class and mask tokens and its position table at the config's
image size. Module paths are those of the transformers classes (>= 4.52, where a VLM's
language model sits at ``model.language_model``): ``model.layers.{i}``,
``model.vision_tower.vision_model.encoder.layers.{i}``, ``lm_head``. A key the file leaves
out takes the default of transformers' config class for that type, and every such default
is listed in :attr:`ConfigParts.assumed` (a plan prints them); the shape keys every
published config carries (:data:`REQUIRED`) are required. Every bad input is one line
(:class:`~pipeplan.errors.InvalidInputError`). torch-free; json only.

:func:`expand_payload` turns a spec's ``{"config": PATH, ...}`` entries into module records
(:meth:`ModelSpec.from_file <pipeplan.models.spec.ModelSpec.from_file>` calls it);
:func:`bare_payload` plans one config alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .._files import read_text
from ..errors import InvalidInputError

__all__ = ["ConfigParts", "REQUIRED", "SUPPORTED", "bare_payload", "config_parts", "expand_payload",
           "is_hf_config", "read_config"]

_LM_TYPES = ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2")
_VISION_TYPES = ("siglip_vision_model", "siglip", "dinov2", "dinov2_with_registers", "idefics3_vision",
                 "smolvlm_vision")
_VLM_TYPES = ("paligemma", "idefics3", "smolvlm")
#: The ``model_type`` values pipeplan reads.
SUPPORTED: tuple[str, ...] = tuple(sorted(_LM_TYPES + _VISION_TYPES + _VLM_TYPES))

_LM_KEYS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
#: Keys a config of each type must hold (every published checkpoint's config does); others default as HF's.
REQUIRED: dict[str, tuple[str, ...]] = {
    **{name: _LM_KEYS for name in _LM_TYPES},
    "siglip_vision_model": ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
                            "patch_size"),
    "idefics3_vision": ("hidden_size", "num_attention_heads", "patch_size", "image_size"),
    "smolvlm_vision": ("hidden_size", "num_attention_heads", "patch_size", "image_size"),
    "dinov2": ("hidden_size", "num_hidden_layers", "num_attention_heads", "patch_size"),
    "dinov2_with_registers": ("hidden_size", "num_hidden_layers", "num_attention_heads", "patch_size"),
}

Default = Any  # a value, or a function of the config read so far (``num_key_value_heads`` = heads)


def _heads(values: Mapping[str, Any]) -> int:
    return int(values["num_attention_heads"])


def _head_dim(values: Mapping[str, Any]) -> int:
    return int(values["hidden_size"]) // int(values["num_attention_heads"])


_DERIVED = {_heads: "num_attention_heads", _head_dim: "hidden_size / num_attention_heads"}

# Defaults of the keys pipeplan reads that a config may leave out, as transformers' config classes set
# them (src/transformers/models/<type>/configuration_<type>.py): class name and defaults.
_DEFAULTS: dict[str, tuple[str, dict[str, Default]]] = {
    "llama": ("LlamaConfig", {"num_key_value_heads": _heads, "head_dim": _head_dim, "tie_word_embeddings": False,
                              "attention_bias": False, "mlp_bias": False, "attention_dropout": 0.0,
                              "max_position_embeddings": 2048}),
    "mistral": ("MistralConfig", {"num_key_value_heads": 8, "head_dim": _head_dim, "tie_word_embeddings": False,
                                  "attention_dropout": 0.0, "max_position_embeddings": 4096 * 32}),
    "qwen2": ("Qwen2Config", {"num_key_value_heads": 32, "tie_word_embeddings": False, "attention_dropout": 0.0,
                              "max_position_embeddings": 32768}),
    "qwen3": ("Qwen3Config", {"num_key_value_heads": 32, "head_dim": 128, "tie_word_embeddings": False,
                              "attention_bias": False, "attention_dropout": 0.0, "max_position_embeddings": 32768}),
    "gemma": ("GemmaConfig", {"num_key_value_heads": 16, "head_dim": 256, "tie_word_embeddings": True,
                              "attention_bias": False, "attention_dropout": 0.0, "max_position_embeddings": 8192}),
    "gemma2": ("Gemma2Config", {"num_key_value_heads": 4, "head_dim": 256, "tie_word_embeddings": True,
                                "attention_bias": False, "attention_dropout": 0.0, "max_position_embeddings": 8192}),
    "siglip_vision_model": ("SiglipVisionConfig", {"image_size": 224, "num_channels": 3, "vision_use_head": True}),
    "idefics3_vision": ("Idefics3VisionConfig", {"intermediate_size": 3072, "num_hidden_layers": 12,
                                                 "num_channels": 3}),
    "smolvlm_vision": ("SmolVLMVisionConfig", {"intermediate_size": 3072, "num_hidden_layers": 12,
                                               "num_channels": 3}),
    "dinov2": ("Dinov2Config", {"image_size": 224, "mlp_ratio": 4, "num_channels": 3, "qkv_bias": True,
                                "use_swiglu_ffn": False}),
    "dinov2_with_registers": ("Dinov2WithRegistersConfig", {"image_size": 224, "mlp_ratio": 4, "num_channels": 3,
                                                            "qkv_bias": True, "use_swiglu_ffn": False,
                                                            "num_register_tokens": 4}),
}
# The VLMs: their parts' types when a sub-config leaves model_type out, the projector's defaults, tied heads.
_VLM_DEFAULTS: dict[str, tuple[str, dict[str, Default]]] = {
    "paligemma": ("PaliGemmaConfig", {"projection_dim": 2048, "tie_word_embeddings": True}),
    "idefics3": ("Idefics3Config", {"scale_factor": 2, "tie_word_embeddings": False}),
    "smolvlm": ("SmolVLMConfig", {"scale_factor": 2, "tie_word_embeddings": False}),
}
_SUB_TYPES = {"paligemma": ("siglip_vision_model", "gemma"), "idefics3": ("idefics3_vision", "llama"),
              "smolvlm": ("smolvlm_vision", "llama")}
# Module paths in transformers (>= 4.52): each VLM's model.<tower>, its language model, the head.
_VLM_PATHS = {"paligemma": ("model.vision_tower.vision_model.", "model.multi_modal_projector",
                            "model.language_model."),
              "idefics3": ("model.vision_model.", "model.connector", "model.text_model."),
              "smolvlm": ("model.vision_model.", "model.connector", "model.text_model.")}
_ATTENTION = {"eager": "eager", "sdpa": "flash", "flash_attention_2": "flash", "flash_attention_3": "flash",
              "flex_attention": "flash"}
SDPA_NOTE = ("attention = flash (transformers runs SDPA unless attn_implementation says eager: the scores are "
             "never stored; a spec entry's attention sets it)")
#: The module name of each part when a spec entry or a bare config does not name it.
PART_NAMES = {"vision_encoder": "vision", "projector": "projector", "embedding": "text_embedding",
              "transformer": "llm", "lm_head": "lm_head"}
_TOKEN_FIELD = {"embedding": "tokens", "transformer": "seq_length", "lm_head": "tokens", "projector": "tokens"}
#: Tokens of a decoder planned from a bare config: its context, at most this many.
BARE_TOKENS = 4096
#: Text tokens of a VLM planned from a bare config (next to one image's tokens).
BARE_TEXT_TOKENS = 64


@dataclass(frozen=True)
class ConfigParts:
    """What one ``config.json`` holds, as module records by kind (token counts left out).

    Attributes:
        model_type: the config's ``model_type``.
        records: per kind (``vision_encoder``, ``projector``, ``embedding``, ``transformer``,
            ``lm_head``), the module record without its name and token count.
        assumed: per kind, the defaults taken for keys the file left out that shape that part (and
            other choices), one sentence each.
        tied: the LM head shares the embedding's table (``tie_word_embeddings``).
        shrink: image patches per projector token (the Idefics3 / SmolVLM pixel shuffle: ``scale_factor²``).
        main: the kind a spec entry means when it gives none (``None`` for a VLM: the entry must say).
    """

    model_type: str
    records: Mapping[str, Mapping[str, Any]]
    assumed: Mapping[str, tuple[str, ...]]
    tied: bool = False
    shrink: int = 1
    main: str | None = None


class _Reader:
    """The keys of one (sub-)config, each checked, with the defaults it took recorded."""

    def __init__(self, config: Mapping[str, Any], where: str, model_type: str) -> None:
        self.config, self.where, self.model_type = config, where, model_type
        self.class_name, self.defaults = _DEFAULTS.get(model_type) or _VLM_DEFAULTS[model_type]
        self.values: dict[str, Any] = {}
        self.taken: dict[str, str] = {}

    def __call__(self, key: str, kind: str = "count") -> Any:
        """The value of ``key``: a ``count`` (integer >= 1), an ``index`` (>= 0), a ``flag`` or a ``rate`` (>= 0)."""
        if key in self.config:
            value = self.config[key]
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            ok, expected = {
                "count": (number and isinstance(value, int) and value >= 1, "an integer >= 1"),
                "index": (number and isinstance(value, int) and value >= 0, "an integer >= 0"),
                "flag": (isinstance(value, bool), "true or false"),
                "rate": (number and value >= 0, "a number >= 0"),
            }[kind]
            if not ok:
                raise InvalidInputError(f"{self.where}: {key} must be {expected}, got {value!r}")
        elif key in REQUIRED.get(self.model_type, ()) or key not in self.defaults:
            raise InvalidInputError(f"{self.where} (model_type {self.model_type}) lacks {key}, which every "
                                    f"{self.model_type} config states (pipeplan does not guess a shape)")
        else:
            default = self.defaults[key]
            value = default(self.values) if callable(default) else default
            derived = f" (= {_DERIVED[default]})" if callable(default) else ""
            self.taken[key] = f"{key} = {json.dumps(value)}{derived}"
        self.values[key] = value
        return value

    def note(self, keys: Sequence[str] | None = None, *, but: Sequence[str] = ()) -> list[str]:
        """One sentence naming the defaults taken (of ``keys``, all but ``but``); [] when none."""
        taken = [text for key, text in self.taken.items() if (keys is None or key in keys) and key not in but]
        if not taken:
            return []
        return [f"{', '.join(taken)} (left out of {self.where}: transformers' {self.class_name} defaults)"]


def _where(source: str, sub: str = "") -> str:
    return f"config {source!r}" + (f" {sub}" if sub else "")


def _model_type(config: Mapping[str, Any], where: str, default: str | None = None) -> str:
    model_type = config.get("model_type", default)
    if model_type is None:
        raise InvalidInputError(f"{where} has no model_type (a Hugging Face config.json names its model's type); "
                                f"supported: {', '.join(SUPPORTED)}")
    if model_type not in SUPPORTED:
        raise InvalidInputError(f"{where}: model_type {model_type!r} is not one pipeplan reads; "
                                f"supported: {', '.join(SUPPORTED)}")
    return str(model_type)


def read_config(path: str | Path) -> dict[str, Any]:
    """The JSON object of a ``config.json`` file (one line when missing, not JSON or not an object)."""
    text = read_text(path, "config file")
    try:
        payload = json.loads(text)
    except json.JSONDecodeError as error:
        raise InvalidInputError(f"config file {str(path)!r} is not valid JSON: {error}") from None
    if not isinstance(payload, dict):
        raise InvalidInputError(f"config file {str(path)!r} must hold a JSON object, got {type(payload).__name__}")
    return payload


def is_hf_config(payload: Any) -> bool:
    """Whether a parsed spec file is a bare Hugging Face config (``model_type``, no ``modules``)."""
    return isinstance(payload, Mapping) and "model_type" in payload and "modules" not in payload


def config_parts(config: Mapping[str, Any], source: str) -> ConfigParts:
    """The parts of a parsed ``config.json`` (``source`` names it in messages and assumptions).

    Raises:
        InvalidInputError: no or an unknown ``model_type``, a missing required key, a value of the wrong type.
    """
    where = _where(source)
    model_type = _model_type(config, where)
    if model_type in _LM_TYPES:
        return _lm_parts(config, where, model_type, "model.")
    if model_type in _VLM_TYPES:
        return _vlm_parts(config, where, model_type)
    if model_type == "siglip":  # SiglipModel: the vision tower of a contrastive pair
        vision = _sub(config, "vision_config", where)
        record, notes = _vision(vision, f"{where} vision_config", _model_type(vision, where, "siglip_vision_model"),
                                "vision_model.")
        return ConfigParts(model_type, {"vision_encoder": record}, {"vision_encoder": tuple(notes)},
                           main="vision_encoder")
    prefix = "" if model_type.startswith("dinov2") else "vision_model."
    record, notes = _vision(config, where, model_type, prefix)
    return ConfigParts(model_type, {"vision_encoder": record}, {"vision_encoder": tuple(notes)},
                       main="vision_encoder")


def _sub(config: Mapping[str, Any], key: str, where: str) -> Mapping[str, Any]:
    sub = config.get(key)
    if not isinstance(sub, Mapping):
        raise InvalidInputError(f"{where} lacks {key} (an object with the part's shapes), got {sub!r}")
    return sub


def _biases(read: _Reader, model_type: str, notes: list[str]) -> dict[str, bool]:
    """``bias`` / ``qkv_bias`` of a decoder block from its type and its ``attention_bias`` / ``mlp_bias``."""
    if model_type == "qwen2":  # Qwen2Attention: q/k/v with biases, o_proj without
        return {"bias": False, "qkv_bias": True}
    if model_type == "mistral":
        return {"bias": False, "qkv_bias": False}
    attention = read("attention_bias", "flag")
    mlp = read("mlp_bias", "flag") if model_type == "llama" else False
    if attention and not mlp:
        notes.append("o_proj's bias (hidden_size per block) is not counted: pipeplan's blocks have biases on "
                     "q/k/v only or on every linear")
        return {"bias": False, "qkv_bias": True}
    if mlp and not attention:
        notes.append("the MLP's biases are not counted: pipeplan's blocks have biases on q/k/v only or on every linear")
    return {"bias": attention and mlp, "qkv_bias": False}


def _lm_parts(config: Mapping[str, Any], where: str, model_type: str, prefix: str, *, head: str = "lm_head",
              tied: bool | None = None, causal: bool = True) -> ConfigParts:
    """A decoder LM's embedding, blocks and head (paths under ``prefix``: ``model.``).

    ``causal``: False for PaliGemma's decoder, whose prefix (image and prompt) attends both ways.
    """
    read = _Reader(config, where, model_type)
    h, layers, heads = read("hidden_size"), read("num_hidden_layers"), read("num_attention_heads")
    ffn, vocab = read("intermediate_size"), read("vocab_size")
    kv = read("num_key_value_heads")
    head_dim = read("head_dim") if "head_dim" in read.defaults or "head_dim" in config else h // heads
    tie = read("tie_word_embeddings", "flag") if tied is None else tied
    notes: list[str] = []
    biases = _biases(read, model_type, notes)
    dropout = read("attention_dropout", "rate") > 0
    if dropout:
        notes.append("attention_dropout > 0: dropout masks are charged after attention and MLP too")
    stack: dict[str, Any] = {
        "kind": "transformer", "num_layers": layers, "hidden_size": h, "num_heads": heads, "num_kv_heads": kv,
        "head_dim": head_dim, "ffn_hidden_size": ffn, "gated_mlp": True, "norm": "rmsnorm", **biases,
        "dropout": dropout, "causal": causal, "final_norm": True,
        "fqn": [prefix + "layers.{i}"], "fqn_last": [prefix + "norm"], "role": "decoder"}
    stack["qk_norm"] = model_type == "qwen3"  # Qwen3Attention: q_norm, k_norm over head_dim
    stack["post_norms"] = model_type == "gemma2"  # Gemma2DecoderLayer: pre/post feedforward and post-attention norms
    stack["attention"] = _attention(config, notes)
    records = {
        "embedding": {"kind": "embedding", "vocab_size": vocab, "hidden_size": h, "fqn": [prefix + "embed_tokens"],
                      "role": "embedding"},
        "transformer": stack,
        "lm_head": {"kind": "lm_head", "vocab_size": vocab, "hidden_size": h, "fqn": [head], "role": "loss"},
    }
    tie_key = ("tie_word_embeddings",)
    assumed = {"embedding": (), "transformer": tuple(read.note(but=tie_key) + notes),
               "lm_head": tuple(read.note(tie_key))}
    return ConfigParts(model_type, records, assumed, tied=bool(tie), main="transformer")


def _attention(config: Mapping[str, Any], notes: list[str]) -> str:
    """``flash`` unless the config names an eager attention (transformers' default kernel is SDPA)."""
    implementation = config.get("_attn_implementation", config.get("attn_implementation"))
    if implementation in _ATTENTION:
        return _ATTENTION[str(implementation)]
    if SDPA_NOTE not in notes:
        notes.append(SDPA_NOTE)
    return "flash"


def _vision(config: Mapping[str, Any], where: str, model_type: str, prefix: str) -> tuple[dict[str, Any], list[str]]:
    """A vision tower's record (paths under ``prefix``) and the notes on its defaults."""
    if model_type not in _DEFAULTS or model_type in _LM_TYPES:
        raise InvalidInputError(f"{where}: model_type {model_type!r} is not a vision tower pipeplan reads; "
                                f"supported: {', '.join(t for t in _VISION_TYPES if t != 'siglip')}")
    read = _Reader(config, where, model_type)
    h, heads, patch = read("hidden_size"), read("num_attention_heads"), read("patch_size")
    layers, image, channels = read("num_hidden_layers"), read("image_size"), read("num_channels")
    notes: list[str] = []
    side = image // patch
    if side == 0:
        raise InvalidInputError(f"{where}: image_size {image} is smaller than patch_size {patch}")
    if image % patch:
        notes.append(f"image_size {image} is read as {side * patch}: {side} whole patches of {patch} px a side "
                     "(the patch convolution's stride drops the rest)")
    record: dict[str, Any] = {"kind": "vision_encoder", "image_size": side * patch, "patch_size": patch,
                              "num_layers": layers, "hidden_size": h, "num_heads": heads, "channels": channels,
                              "norm": "layernorm", "bias": True, "final_norm": True,
                              "attention": _attention(config, notes)}
    if model_type.startswith("dinov2"):  # Dinov2Model: embeddings (cls, mask, positions), encoder.layer, layernorm
        ratio = read("mlp_ratio")
        swiglu = read("use_swiglu_ffn", "flag")
        ffn = h * ratio
        if swiglu:  # Dinov2SwiGLUFFN: 2/3 of the width, rounded up to a multiple of 8
            ffn = (int(ffn * 2 / 3) + 7) // 8 * 8
        if not read("qkv_bias", "flag"):
            notes.append("qkv_bias false: the q/k/v biases (3 × hidden_size per block) are counted all the same")
        registers = read("num_register_tokens", "index") if model_type == "dinov2_with_registers" else 0
        record.update(ffn_hidden_size=ffn, gated_mlp=swiglu, layer_scale=True, extra_tokens=1 + registers,
                      position_tokens=side * side + 1, extra_params=h,
                      fqn=[prefix + "encoder.layer.{i}"],
                      fqn_first=[prefix + "embeddings"], fqn_last=[prefix + "layernorm"])
    else:  # SigLIP-style: embeddings (patches, positions), encoder.layers, post_layernorm (, head)
        record.update(ffn_hidden_size=read("intermediate_size"), gated_mlp=False, position_tokens=side * side,
                      fqn=[prefix + "encoder.layers.{i}"], fqn_first=[prefix + "embeddings"],
                      fqn_last=[prefix + "post_layernorm"])
        if model_type == "siglip_vision_model" and read("vision_use_head", "flag"):
            record.update(map_head=True, fqn_first=[prefix + "embeddings", prefix + "head"])
    return record, read.note() + notes


def _vlm_parts(config: Mapping[str, Any], where: str, model_type: str) -> ConfigParts:
    """A VLM's tower, projector, embedding, decoder and head."""
    read = _Reader(config, where, model_type)
    vision_type, text_type = _SUB_TYPES[model_type]
    vision_path, projector_path, text_path = _VLM_PATHS[model_type]
    vision_config, text_config = _sub(config, "vision_config", where), _sub(config, "text_config", where)
    vision, notes = _vision(vision_config, f"{where} vision_config", _model_type(vision_config, where, vision_type),
                            vision_path)
    text_where = f"{where} text_config"
    text_kind = _model_type(text_config, text_where, text_type)
    if text_kind not in _LM_TYPES:
        raise InvalidInputError(f"{text_where}: model_type {text_kind!r} is not a decoder pipeplan reads; "
                                f"supported: {', '.join(_LM_TYPES)}")
    if "tie_word_embeddings" in config or "tie_word_embeddings" not in text_config:
        tied = read("tie_word_embeddings", "flag")
    else:
        tied = _Reader(text_config, text_where, text_kind)("tie_word_embeddings", "flag")
    # PaliGemma attends both ways over the image and the prompt (transformers' prefix-LM mask)
    text = _lm_parts(text_config, text_where, text_kind, text_path, tied=tied, causal=model_type != "paligemma")
    width = vision["hidden_size"]
    if model_type == "paligemma":  # PaliGemmaMultiModalProjector: Linear(vision width, projection_dim), bias
        shrink = 1
        projector = {"kind": "projector", "linears": [[width, read("projection_dim")]], "bias": True,
                     "activation": False, "fqn": [projector_path]}
    else:  # Idefics3Connector: pixel shuffle by scale_factor, then Linear(width · scale², text width), no bias
        scale = read("scale_factor")
        side = vision["image_size"] // vision["patch_size"]
        if side % scale:
            raise InvalidInputError(f"{where}: scale_factor {scale} must divide the {side} patches a side")
        shrink = scale * scale
        projector = {"kind": "projector", "linears": [[width * shrink, text.records["transformer"]["hidden_size"]]],
                     "bias": False, "activation": False, "fqn": [projector_path]}
    records = {"vision_encoder": vision, "projector": projector, **text.records}
    tie_key = ("tie_word_embeddings",)
    assumed = {**text.assumed, "vision_encoder": tuple(notes), "projector": tuple(read.note(but=tie_key)),
               "lm_head": text.assumed["lm_head"] + tuple(read.note(tie_key))}
    return ConfigParts(model_type, records, assumed, tied=tied, shrink=shrink)


# ------------------------------------------------------------------ specs
def _prefixed(record: dict[str, Any], prefix: str) -> None:
    for key in ("fqn", "fqn_first", "fqn_last"):
        if key in record:
            record[key] = [prefix + path for path in record[key]]


def _output_tokens(module: Any) -> int:
    return int(module.output_shape()[0])


def expand_payload(payload: Mapping[str, Any], base: Path,
                   build: Callable[[Mapping[str, Any], int], Any]) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A spec payload with each ``{"config": PATH, ...}`` module entry replaced by its full record.

    An entry's ``config`` is read relative to ``base`` (the spec file's folder); its ``kind`` picks
    the part (default: the config's decoder or tower; a VLM's entry must say); ``fqn_prefix`` is put
    before the part's module paths; every other key is a module field that overrides the config's.
    A decoder without ``seq_length`` takes the tokens of the modules it reads, a projector without
    ``tokens`` its input's (a pixel shuffle divides them); a tied head without ``tied_to`` ties to
    the embedding read from the same file. ``build(record, position)`` makes a module (for those
    token counts). Returns the payload and the assumptions (``"llm: head_dim = 256 (...)"``).
    """
    raw = payload.get("modules")
    if not isinstance(raw, Sequence) or isinstance(raw, (str, bytes)) or not any(
            isinstance(entry, Mapping) and "config" in entry for entry in raw):
        return dict(payload), ()
    built: dict[str, Any] = {}
    embeddings: dict[str, str] = {}  # a config file's embedding module, for its tied head
    modules: list[Any] = []
    assumed: list[str] = []
    for position, entry in enumerate(raw):
        if isinstance(entry, Mapping) and "config" in entry:
            record, notes = _entry_record(entry, position, base, built, embeddings, modules)
            assumed += [f"{record['name']}: {note}" for note in notes if not any(note in a for a in assumed)]
        else:
            record = entry
        modules.append(record)
        module = build(record, position)
        built[module.name] = module
    return {**payload, "modules": modules}, tuple(assumed)


def _entry_record(entry: Mapping[str, Any], position: int, base: Path, built: Mapping[str, Any],
                  embeddings: dict[str, str], previous: Sequence[Mapping[str, Any]]) -> tuple[dict[str, Any], list[str]]:
    name = entry.get("name")
    label = f"modules[{position}]" + (f" ({name})" if isinstance(name, str) and name else "")
    path = entry["config"]
    if not isinstance(path, str) or not path:
        raise InvalidInputError(f"{label}.config must be the path of a config.json, got {path!r}")
    file = Path(path) if Path(path).is_absolute() else base / path
    parts = config_parts(read_config(file), str(file))
    kind = entry.get("kind", parts.main)
    if kind is None:
        raise InvalidInputError(f"{label}: a {parts.model_type} config holds several parts; give kind, one of "
                                f"{', '.join(parts.records)}")
    if kind not in parts.records:
        raise InvalidInputError(f"{label}.kind {kind!r} is not a part of the {parts.model_type} config {str(file)!r}; "
                                f"its parts: {', '.join(parts.records)}")
    prefix = entry.get("fqn_prefix", "")
    if not isinstance(prefix, str):
        raise InvalidInputError(f"{label}.fqn_prefix must be a string (put before the config's module paths), "
                                f"got {prefix!r}")
    if not (isinstance(name, str) and name):
        label = f"modules[{position}] ({PART_NAMES[kind]})"
    if "tokens" in entry and kind in ("transformer", "vision_encoder"):
        words = ("a transformer's tokens are its seq_length (tokens per sequence): write \"seq_length\""
                 if kind == "transformer" else "a vision tower's tokens follow from image_size, patch_size, "
                 "cameras and frames: give those")
        raise InvalidInputError(f"{label}.tokens: {words}")
    record = {**parts.records[kind], "name": PART_NAMES[kind]}
    _prefixed(record, prefix)
    record.update({key: value for key, value in entry.items() if key not in ("config", "fqn_prefix")})
    record["kind"] = kind
    notes = [note for note in parts.assumed.get(kind, ()) if note != SDPA_NOTE or "attention" not in entry]
    key = str(file.resolve())
    if kind == "embedding" and isinstance(record.get("name"), str):
        embeddings[key] = record["name"]
    if kind == "lm_head" and parts.tied and "tied_to" not in entry:
        if key not in embeddings:
            raise InvalidInputError(f"{label}: {str(file)!r} ties the head to the embedding (tie_word_embeddings); "
                                    "list that embedding (same config, kind embedding) before it or give tied_to")
        record["tied_to"] = embeddings[key]
    field = _TOKEN_FIELD.get(kind)
    if field and field not in entry:
        tokens, how = _inferred_tokens(kind, record, position, built, previous, parts.shrink)
        if tokens is None:
            raise InvalidInputError(f"{label} lacks {field}: a config.json gives shapes, not the tokens a model "
                                    f"runs on; give {field}")
        record[field] = tokens
        notes.append(f"{field} = {tokens} ({how})")
    return record, notes


def _inferred_tokens(kind: str, record: Mapping[str, Any], position: int, built: Mapping[str, Any],
                     previous: Sequence[Mapping[str, Any]], shrink: int) -> tuple[int | None, str]:
    """A decoder's or projector's tokens from the modules it reads (``None``: no inputs to count)."""
    if kind not in ("transformer", "projector") or record.get("joint_with") is not None:
        return None, ""
    inputs = record.get("inputs")
    if inputs is None:
        prior = previous[position - 1].get("name") if position else None
        inputs = [prior] if isinstance(prior, str) else []
    if not isinstance(inputs, list) or not inputs or any(name not in built for name in inputs):
        return None, ""
    total = sum(_output_tokens(built[name]) for name in inputs)
    if kind == "projector":
        return total // shrink, (f"its input's tokens / {shrink} (pixel shuffle)" if shrink > 1
                                 else "its input's tokens")
    return total, f"the tokens of {', '.join(inputs)}"


def bare_payload(config: Mapping[str, Any], source: str, name: str) -> tuple[dict[str, Any], tuple[str, ...]]:
    """A spec payload that plans one ``config.json`` alone, and its assumptions.

    A decoder: its embedding, blocks and head over ``min(max_position_embeddings, 4096)``
    tokens; a tower: one image at its size; a VLM: one image, :data:`BARE_TEXT_TOKENS` text
    tokens, logits at every position (as transformers computes them).
    """
    parts = config_parts(config, source)
    records = {kind: {**record, "name": PART_NAMES[kind]} for kind, record in parts.records.items()}
    notes = list(dict.fromkeys(note for kind in records for note in parts.assumed.get(kind, ())))
    if parts.main == "vision_encoder":
        notes.append("one image per example")
        return {"name": name, "modules": [records["vision_encoder"]]}, tuple(notes)
    modules: list[dict[str, Any]] = []
    if parts.main is None:  # a VLM
        vision = records["vision_encoder"]
        image = (vision["image_size"] // vision["patch_size"]) ** 2 // parts.shrink
        text = BARE_TEXT_TOKENS
        tokens = image + text
        records["projector"]["tokens"] = image
        records["transformer"]["inputs"] = [PART_NAMES["projector"], PART_NAMES["embedding"]]
        modules += [vision, records["projector"]]
        notes.append(f"one image ({image} tokens) and {text} text tokens per example; logits at all {tokens}")
    else:
        context = _Reader(config, _where(source), parts.model_type)("max_position_embeddings")
        tokens = text = min(context, BARE_TOKENS)
        notes.append(f"{tokens} tokens per example (max_position_embeddings {context}, at most {BARE_TOKENS}; "
                     "a spec file's seq_length and tokens set them)")
    records["embedding"]["tokens"] = text
    records["transformer"]["seq_length"] = tokens
    records["lm_head"]["tokens"] = tokens
    if parts.tied:
        records["lm_head"]["tied_to"] = PART_NAMES["embedding"]
    modules += [records["embedding"], records["transformer"], records["lm_head"]]
    return {"name": name, "modules": modules}, tuple(notes)

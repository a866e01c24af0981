"""A Megatron-LM launch line or launch script, read back into a :class:`~pipeplan.engines.run_config.RunConfig`.

    from pathlib import Path
    from pipeplan.engines.megatron_args import read_megatron_args
    config = read_megatron_args(Path("train_gpt.sh"))
    config.value("tp"), config.source_of("tp")   # 2, 'train_gpt.sh: --tensor-model-parallel-size 2'
    config.model                                 # the GPT the line's shape flags describe, or None

What is read (the file is never run: :mod:`shlex` splits it, no shell executes it):

* a bare flag line (``--pipeline-model-parallel-size 4 ...``), a launch line
  (``torchrun --nproc-per-node 8 --nnodes 2 pretrain_gpt.py ...``, ``python -m
  torch.distributed.run``, ``deepspeed``, ``python``), or a script holding one, with
  backslash-continued lines, comments and shell variables assigned in the same file
  (``GPT_ARGS="--num-layers 24 ..."``, arrays ``ARGS=(--a 1)``, ``${X:-default}``)
  expanded where the line uses them; a variable never assigned there is refused
  where the line needs its value;
* pipeplan's own export, ``megatron_args.sh`` (its ``LINE='...'``).

The flags pipeplan prices map to :data:`~pipeplan.engines.run_config.FIELDS` (the
parallel degrees, the split, the batches, the distributed optimizer, gradient
overlap, recompute, sequence parallelism, ``--tp-comm-overlap``, precision, and the
GPT's shape, which gives :attr:`RunConfig.model`); a field the line leaves out gets
Megatron-LM's default with a source saying so. The flags of :data:`IGNORED_FLAGS`
(logging, checkpoints, data, the learning-rate schedule, optimizer
hyper-parameters, initialisation, fusions) are listed in ``ignored``. A flag in
neither list is refused when it is one letter or so away from a known one (a
typo), else listed in ``ignored`` with "(not a flag pipeplan knows; not priced)".

Flag names, defaults and rules from NVIDIA/Megatron-LM at commit d98e8a64
(:data:`~pipeplan.engines.megatron.MEGATRON_COMMIT`): ``megatron/training/arguments.py``
(the parser and ``validate_args``), ``megatron/core/transformer/transformer_config.py``
(``TransformerConfig``'s defaults, whose fields become flags there) and
``megatron/core/tokenizers/utils/build_tokenizer.py`` (vocabulary padding).
"""

from __future__ import annotations

import difflib
import json
import math
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import InvalidInputError
from ..models.modules import Attention, Embedding, LMHead, Norm, TransformerStack
from ..models.spec import ModelSpec
from .run_config import RunConfig, Setting

__all__ = [
    "read_megatron_args",
    "PRICED_FLAGS",
    "MODEL_FLAGS",
    "IGNORED_FLAGS",
    "REFUSED_FLAGS",
    "RETIRED_FLAGS",
    "LAUNCHER_FLAGS",
    "TOKENIZER_VOCAB",
]

#: Flags the reader turns into RunConfig fields, and what each takes ("int", "str", "flag": no value,
#: "list": one or more values, "float").
PRICED_FLAGS: Mapping[str, str] = {
    "--tensor-model-parallel-size": "int",
    "--pipeline-model-parallel-size": "int",
    "--num-layers-per-virtual-pipeline-stage": "int",
    "--num-virtual-stages-per-pipeline-rank": "int",
    "--pipeline-model-parallel-layout": "str",
    "--account-for-embedding-in-pipeline-split": "flag",
    "--account-for-loss-in-pipeline-split": "flag",
    "--decoder-first-pipeline-num-layers": "int",
    "--decoder-last-pipeline-num-layers": "int",
    "--micro-batch-size": "int",
    "--global-batch-size": "int",
    "--use-distributed-optimizer": "flag",
    "--overlap-grad-reduce": "flag",
    "--overlap-param-gather": "flag",
    "--grad-reduce-in-bf16": "flag",
    "--accumulate-allreduce-grads-in-fp32": "flag",
    "--recompute-granularity": "str",
    "--recompute-method": "str",
    "--recompute-num-layers": "int",
    "--recompute-modules": "list",
    "--recompute-activations": "flag",
    "--sequence-parallel": "flag",
    "--tp-comm-overlap": "flag",
    "--bf16": "flag",
    "--fp16": "flag",
    "--seq-length": "int",
}

#: Flags that give the GPT's shape (:attr:`RunConfig.model`).
MODEL_FLAGS: Mapping[str, str] = {
    "--num-layers": "int",
    "--hidden-size": "int",
    "--num-attention-heads": "int",
    "--ffn-hidden-size": "int",
    "--kv-channels": "int",
    "--group-query-attention": "flag",
    "--num-query-groups": "int",
    "--swiglu": "flag",
    "--normalization": "str",
    "--position-embedding-type": "str",
    "--use-rotary-position-embeddings": "flag",
    "--no-position-embedding": "flag",
    "--max-position-embeddings": "int",
    "--untie-embeddings-and-output-weights": "flag",
    "--disable-bias-linear": "flag",
    "--attention-dropout": "float",
    "--hidden-dropout": "float",
    "--use-flash-attn": "flag",
    "--attention-backend": "str",
    "--transformer-impl": "str",
    "--vocab-size": "int",
    "--padded-vocab-size": "int",
    "--tokenizer-type": "str",
    "--make-vocab-size-divisible-by": "int",
    "--no-pad-vocab-size": "flag",
}

#: Flags of what pipeplan does not plan: refused when set to anything but Megatron-LM's default
#: (flag → (its default, ``""``: none; why it is refused)).
REFUSED_FLAGS: Mapping[str, tuple[str, str]] = {
    "--context-parallel-size": ("1", "pipeplan does not plan context parallelism yet"),
    "--expert-model-parallel-size": ("1", "pipeplan does not plan expert parallelism yet"),
    "--num-experts": ("", "pipeplan does not plan mixture-of-experts layers yet"),
    "--use-torch-fsdp2": ("", "pipeplan does not read Megatron-LM's FSDP yet (plan it with --dp-mode fsdp)"),
    "--use-megatron-fsdp": ("", "pipeplan does not read Megatron-LM's FSDP yet (plan it with --dp-mode fsdp)"),
    "--hybrid-layer-pattern": ("", "pipeplan does not plan hybrid (Mamba) layers yet"),
    "--mtp-num-layers": ("", "pipeplan does not plan multi-token prediction layers yet"),
    "--multi-latent-attention": ("", "pipeplan does not plan multi-latent attention yet"),
    "--encoder-num-layers": ("", "pipeplan does not plan encoder-decoder models yet"),
    "--decoder-num-layers": ("", "pipeplan reads a GPT's layer count from --num-layers; give that instead"),
}

#: Older spellings Megatron-LM no longer has → what replaced them (read as the new one).
#: ``--virtual-pipeline-model-parallel-size``: replaced in NVIDIA/Megatron-LM dcef9069
#: ("Change argument to control the number of model chunks in a stage").
RETIRED_FLAGS: Mapping[str, str] = {
    "--virtual-pipeline-model-parallel-size": "--num-virtual-stages-per-pipeline-rank",
}

#: Megatron-LM flags read and not priced: logging, checkpoints, data, tokenizer files, the
#: learning-rate schedule, optimizer hyper-parameters, initialisation, kernels and fusions, timers.
IGNORED_FLAGS: tuple[str, ...] = (
    # logging and profiling
    "--log-interval", "--log-params-norm", "--log-num-zeros-in-grad", "--log-throughput", "--log-timers-to-tensorboard",
    "--log-validation-ppl-to-tensorboard", "--log-memory-to-tensorboard", "--log-world-size-to-tensorboard",
    "--no-log-loss-scale-to-tensorboard",
    "--log-progress", "--timing-log-level", "--timing-log-option", "--tensorboard-dir", "--tensorboard-log-interval",
    "--tensorboard-queue-size", "--wandb-project", "--wandb-exp-name", "--wandb-save-dir", "--profile",
    "--profile-step-start", "--profile-step-end", "--profile-ranks", "--use-pytorch-profiler", "--record-memory-history",
    "--no-barrier-with-level-1-timing", "--logging-level",
    # checkpoints
    "--save", "--load", "--save-interval", "--no-save-optim", "--no-save-rng", "--no-load-optim", "--no-load-rng",
    "--finetune", "--pretrained-checkpoint", "--ckpt-format", "--ckpt-step", "--ckpt-fully-parallel-load",
    "--ckpt-assume-constant-structure", "--async-save", "--use-dist-ckpt", "--auto-detect-ckpt-format",
    "--dist-ckpt-strictness", "--use-checkpoint-args", "--exit-on-missing-checkpoint", "--non-persistent-save-interval",
    "--non-persistent-ckpt-type",
    # data and tokenizer files
    "--data-path", "--train-data-path", "--valid-data-path", "--test-data-path", "--data-cache-path", "--split",
    "--mock-data", "--vocab-file", "--merge-file", "--tokenizer-model", "--num-workers", "--data-args-path",
    "--per-split-data-args-path", "--no-mmap-bin-files", "--no-create-attention-mask-in-dataloader",
    "--reset-position-ids", "--reset-attention-mask", "--eod-mask-loss", "--dataloader-type", "--vocab-extra-ids",
    "--object-storage-cache-path",
    # training length, evaluation, exit
    "--train-iters", "--train-samples", "--eval-interval", "--eval-iters", "--skip-train", "--exit-interval",
    "--exit-duration-in-mins", "--exit-signal-handler", "--rampup-batch-size",
    # learning-rate schedule
    "--lr", "--min-lr", "--lr-decay-style", "--lr-decay-iters", "--lr-decay-samples", "--lr-warmup-fraction",
    "--lr-warmup-iters", "--lr-warmup-samples", "--lr-warmup-init", "--lr-wsd-decay-style", "--lr-wsd-decay-iters",
    "--lr-wsd-decay-samples", "--override-opt-param-scheduler", "--use-checkpoint-opt-param-scheduler",
    "--override-opt_param-scheduler", "--use-checkpoint-opt_param-scheduler",
    "--start-weight-decay", "--end-weight-decay", "--weight-decay-incr-style",
    # optimizer hyper-parameters and loss scaling
    "--optimizer", "--adam-beta1", "--adam-beta2", "--adam-eps", "--sgd-momentum", "--weight-decay", "--clip-grad",
    "--loss-scale", "--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis",
    "--attention-softmax-in-fp32", "--fp16-lm-cross-entropy",
    "--apply-query-key-layer-scaling",
    # initialisation and seeds
    "--seed", "--init-method-std", "--init-method-xavier-uniform", "--data-parallel-random-init",
    # model details pipeplan does not price (rope parameters, activations, norms' epsilon)
    "--rotary-base", "--rotary-percent", "--rotary-seq-len-interpolation-factor", "--norm-epsilon",
    "--apply-layernorm-1p", "--apply-residual-connection-post-layernorm", "--openai-gelu", "--squared-relu",
    "--qk-layernorm", "--use-mcore-models", "--spec", "--add-qkv-bias",
    # kernels and fusions
    "--no-masked-softmax-fusion", "--no-bias-gelu-fusion", "--no-bias-swiglu-fusion", "--no-bias-dropout-fusion",
    "--no-gradient-accumulation-fusion", "--no-persist-layer-norm", "--no-rope-fusion", "--cross-entropy-loss-fusion",
    "--cross-entropy-fusion-impl", "--use-fused-weighted-squared-relu",
    # distributed setup and communication details
    "--distributed-backend", "--distributed-timeout-minutes", "--local-rank", "--ddp-bucket-size",
    "--ddp-average-in-collective", "--no-align-grad-reduce", "--no-align-param-gather", "--no-overlap-p2p-communication",
    "--overlap-p2p-communication-warmup-flush", "--no-check-for-nan-in-loss-and-grad",
    "--tp-comm-overlap-cfg",
    "--no-tp-comm-overlap-ag", "--no-tp-comm-overlap-rs", "--disable-tp-comm-overlap-ag", "--disable-tp-comm-overlap-rs",
    "--tp-comm-overlap-rs-dgrad", "--no-tp-comm-bulk-dgrad", "--no-tp-comm-bulk-wgrad", "--no-tp-comm-split-ag",
    "--no-tp-comm-split-rs", "--use-cpu-initialization", "--empty-unused-memory-level", "--manual-gc",
    "--manual-gc-interval", "--deterministic-mode", "--calculate-per-token-loss", "--defer-embedding-wgrad-compute",
    "--overlap-param-gather-with-optimizer-step", "--use-ring-exchange-p2p", "--fp8-format", "--fp8-recipe",
    "--fp8-param-gather", "--fp8-amax-history-len", "--fp8-amax-compute-algo", "--fp4-format", "--fp4-recipe",
    "--fp4-param-gather", "--persistent-save-interval",
)

#: Launcher options that give the world size: (ranks per node, nodes) spellings.
LAUNCHER_FLAGS: Mapping[str, str] = {
    "--nproc_per_node": "per_node", "--nproc-per-node": "per_node", "--num_gpus": "per_node", "--num-gpus": "per_node",
    "--nnodes": "nodes", "--num_nodes": "nodes", "--num-nodes": "nodes",
}

#: Vocabulary sizes of the tokenizers whose size is fixed (before Megatron-LM pads it): GPT-2's BPE
#: (50257 tokens, the vocab.json of openai-community/gpt2).
TOKENIZER_VOCAB: Mapping[str, int] = {"GPT2BPETokenizer": 50257}

_LAUNCHERS = ("torchrun", "deepspeed")
_NOT_A_FLAG = "(not a flag pipeplan knows; not priced)"
_SHAPE = ("--num-layers", "--hidden-size", "--num-attention-heads", "--seq-length")
_RECOMPUTE_GRANULARITY = ("selective", "full")
_RECOMPUTE_METHOD = ("uniform", "block")
_NEAR_MISS_CUTOFF = 0.9
_UNASSIGNED = "\x00"  # marks a variable the file never assigns


# ---------------------------------------------------------------------------------------------- shell words
@dataclass
class _Script:
    """The file's commands as word lists, and the variables it assigns (values already expanded)."""

    name: str
    commands: list[list[str]] = field(default_factory=list)
    variables: dict[str, list[str]] = field(default_factory=dict)
    pipeplan_export: bool = False


def _lexer(text: str) -> shlex.shlex:
    lexer = shlex.shlex(text, posix=True, punctuation_chars="();<>|&\n")
    lexer.whitespace = " \t\r"
    lexer.whitespace_split = True
    lexer.commenters = ""
    return lexer


_VARIABLE = re.compile(r"\$(?:\{(?P<braced>[A-Za-z_][A-Za-z0-9_]*)(?:\[[@*0-9]\])?(?::?-(?P<default>[^}]*))?\}"
                       r"|(?P<plain>[A-Za-z_][A-Za-z0-9_]*|[0-9@*#]))")
_PUNCTUATION = set("();<>|&\n")


def _split_words(text: str) -> list[str]:
    """``text`` split as :func:`shlex.split` does (on whitespace where its quotes do not balance)."""
    try:
        return shlex.split(text)
    except ValueError:
        return text.split()


def _expand(text: str, variables: Mapping[str, list[str]], *, quote_literals: bool) -> list[str]:
    """``text`` with ``$X`` / ``${X}`` / ``${X[@]}`` / ``${X:-d}`` replaced, split into words as an unquoted
    expansion is.

    ``quote_literals``: the text between references is one word's (a command word, already unquoted by
    the lexer) rather than a value still to be split (an assignment's). A variable the file never
    assigns, or a command substitution (``$(...)``), leaves the words it is in marked (:data:`_UNASSIGNED`).
    """
    if "$(" in text or "`" in text:
        return [_UNASSIGNED + text]
    unassigned = False
    pieces: list[str] = []
    last = 0
    for match in _VARIABLE.finditer(text):
        literal = text[last:match.start()]
        pieces.append(shlex.quote(literal) if quote_literals and literal else literal)
        last = match.end()
        name = match.group("braced") or match.group("plain")
        if name in variables:
            pieces.append(" ".join(shlex.quote(value) for value in variables[name]))
        elif match.group("default") is not None:
            pieces.append(shlex.quote(match.group("default")))
        else:
            unassigned = True
            pieces.append(shlex.quote(match.group(0)))
    literal = text[last:]
    pieces.append(shlex.quote(literal) if quote_literals and literal else literal)
    words = _split_words("".join(pieces))
    return [_UNASSIGNED + word if unassigned and "$" in word and not word.startswith(_UNASSIGNED) else word
            for word in words]


def _command_word(token: str, variables: Mapping[str, list[str]]) -> list[str]:
    """One command word: as it is without ``$``; expanded and split with one."""
    return _expand(token, variables, quote_literals=True) if "$" in token or "`" in token else [token]


def _strip_comments(text: str) -> str:
    """``text`` without its comments: an unquoted ``#`` that starts a word, to the end of its line.

    (:mod:`shlex` would read an apostrophe in a comment, ``# don't``, as an open quote.)
    """
    out: list[str] = []
    quote = ""
    index = 0
    while index < len(text):
        char = text[index]
        if quote:
            if char == "\\" and quote == '"' and index + 1 < len(text):
                out += text[index:index + 2]
                index += 2
                continue
            if char == quote:
                quote = ""
        elif char == "\\" and index + 1 < len(text):
            out += text[index:index + 2]
            index += 2
            continue
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t\n;&|("):
            end = text.find("\n", index)
            index = len(text) if end < 0 else end
            continue
        out.append(char)
        index += 1
    return "".join(out)


_ASSIGNMENT = re.compile(r"^(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?P<plus>\+?)=(?P<value>.*)$", re.S)
_KEYWORDS = ("export", "local", "declare", "readonly", "exec", "then", "else", "do", "time", "nohup")


def _parse_script(text: str, name: str) -> _Script:
    """Split ``text`` into commands (words, variables expanded) and assignments. Raises on unbalanced quotes."""
    script = _Script(name, pipeplan_export="# pipeplan: Megatron-LM flags" in text)
    text = _strip_comments(text.replace("\\\r\n", " ").replace("\\\n", " "))
    try:
        tokens = list(_lexer(text))
    except ValueError as error:
        raise InvalidInputError(f"{name}: cannot split it as a shell script ({error})") from None
    command: list[str] = []
    array: tuple[str, bool] | None = None  # (name, +=) while inside NAME=( ... )
    elements: list[str] = []
    redirect = False
    substitution = 0  # depth inside an unquoted $( ... )
    for token in tokens:
        punctuation = bool(token) and set(token) <= _PUNCTUATION
        if substitution:
            if punctuation:
                substitution += token.count("(") - token.count(")")
            if substitution > 0:
                continue
            substitution = 0
            continue
        if punctuation:
            for position, char in enumerate(token):
                if char == "(" and command and command[-1].endswith("$"):
                    command[-1] += "(...)"
                    rest = token[position:]
                    substitution = rest.count("(") - rest.count(")")
                    if substitution <= 0:  # closed in this token: what follows it is handled as usual
                        substitution = 0
                    break
                if char == "(" and command and command[-1].endswith("=") and _ASSIGNMENT.match(command[-1]):
                    match = _ASSIGNMENT.match(command.pop())
                    assert match is not None
                    array, elements = (match.group("name"), bool(match.group("plus"))), []
                elif char == ")" and array is not None:
                    array_name, append = array
                    script.variables[array_name] = (script.variables.get(array_name, []) if append else []) + elements
                    array = None
                elif char in "<>":
                    redirect = True
                elif char in "\n;|&" and array is None:
                    _finish(script, command)
                    command = []
            continue
        if redirect:
            redirect = False
            continue
        if array is not None:
            elements += _command_word(token, script.variables)
            continue
        command.append(token)
    _finish(script, command)
    return script


def _finish(script: _Script, command: list[str]) -> None:
    """Record ``command``: leading ``NAME=value`` words are assignments (alone) or the command's environment."""
    words = list(command)
    while words and words[0] in _KEYWORDS:
        keyword = words.pop(0)
        if keyword in ("local", "declare", "readonly"):
            words = [w for w in words if not w.startswith("-")]
    assignments = []
    while words and _ASSIGNMENT.match(words[0]):
        assignments.append(words.pop(0))
    for assignment in assignments if not words else []:  # NAME=value command: that command's environment only
        match = _ASSIGNMENT.match(assignment)
        assert match is not None
        value = _expand(match.group("value"), script.variables, quote_literals=False)
        previous = script.variables.get(match.group("name"), []) if match.group("plus") else []
        script.variables[match.group("name")] = previous + value
    if words:
        expanded: list[str] = []
        for word in words:
            expanded += _command_word(word, script.variables)
        script.commands.append(expanded)


# ---------------------------------------------------------------------------------------------- the launch line
@dataclass
class _Line:
    """The launch line: launcher options and Megatron-LM's flags, in order."""

    launcher: list[str]
    args: list[str]


def _is_python(word: str) -> bool:
    return re.fullmatch(r"(.*/)?python[0-9.]*", word) is not None


def _launch_line(script: _Script) -> _Line:
    if script.pipeplan_export and "LINE" in script.variables:
        return _Line([], script.variables["LINE"])
    best: _Line | None = None
    for words in script.commands:
        line = _split_command(words)
        if line is not None and (best is None or _megatron_count(line.args) >= _megatron_count(best.args)):
            best = line
    if best is None:
        raise InvalidInputError(
            f"{script.name} holds no Megatron-LM launch line (torchrun/python/deepspeed ... pretrain_gpt.py --flags, "
            "or the flags alone)")
    return best


def _megatron_count(words: Sequence[str]) -> int:
    """How many of ``words`` are flags this module knows (the launch line is the command with the most)."""
    known = set(PRICED_FLAGS) | set(MODEL_FLAGS) | set(IGNORED_FLAGS) | set(REFUSED_FLAGS)
    return sum(word.partition("=")[0] in known for word in words)


def _split_command(words: list[str]) -> _Line | None:
    """The launcher part and the flags of one command, or ``None`` when it launches no training script."""
    if words and words[0].startswith("--"):
        return _Line([], words)
    for index, word in enumerate(words):
        if word.endswith(".py") and not word.startswith("-"):
            head = words[:index]
            if not head or any(_is_python(w) or w.rsplit("/", 1)[-1] in _LAUNCHERS or w.startswith(_UNASSIGNED)
                               for w in head):  # a launcher, or one from the environment ($LAUNCHER)
                return _Line(head, words[index + 1:])
    return None


# ---------------------------------------------------------------------------------------------- flags
@dataclass
class _Flags:
    """Megatron-LM's flags as given: flag → its values (the last occurrence wins, as argparse does)."""

    path: str
    values: dict[str, list[str]] = field(default_factory=dict)
    ignored: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def given(self, flag: str) -> bool:
        return flag in self.values

    def text(self, flag: str) -> str:
        values = self.values[flag]
        return " ".join([flag] + [shlex.quote(v) for v in values])

    def source(self, *flags: str) -> str:
        return f"{self.path}: " + " ".join(self.text(flag) for flag in flags if self.given(flag))

    def default(self, flag: str, what: str = "") -> str:
        return f"Megatron-LM default{' ' + what if what else ''} ({self.path} does not set {flag})"

    def one(self, flag: str) -> str:
        values = self.values[flag]
        if len(values) != 1:
            raise InvalidInputError(f"{flag} takes one value, got {len(values)} ({self.text(flag)})")
        _needs_value(flag, values[0], self.path)
        return values[0]

    def integer(self, flag: str, minimum: int = 1) -> int:
        value = self.one(flag)
        try:
            number = int(value)
        except ValueError:
            raise InvalidInputError(f"{flag} must be an integer >= {minimum}, got {value!r}") from None
        if number < minimum:
            raise InvalidInputError(f"{flag} must be an integer >= {minimum}, got {number}")
        return number

    def number(self, flag: str) -> float:
        value = self.one(flag)
        try:
            return float(value)
        except ValueError:
            raise InvalidInputError(f"{flag} must be a number, got {value!r}") from None


def _needs_value(flag: str, value: str, path: str) -> None:
    if value.startswith(_UNASSIGNED):
        raise InvalidInputError(f"{flag} is {value[1:]}, which {path} never assigns (pipeplan runs no shell: "
                                "write the value, or assign it in the file)")


_KNOWN = {**PRICED_FLAGS, **MODEL_FLAGS}


def _collect(args: Sequence[str], path: str) -> _Flags:
    """Group ``args`` into flags and values; classify each flag (priced, ignored, refused, typo, unknown)."""
    flags = _Flags(path)
    known = sorted(set(_KNOWN) | set(IGNORED_FLAGS) | set(REFUSED_FLAGS))
    index = 0
    while index < len(args):
        word = args[index]
        if word.startswith(_UNASSIGNED):
            raise InvalidInputError(f"{word[1:]} is never assigned in {path}, and the line needs it (pipeplan runs "
                                    "no shell: write its flags out, or assign it in the file)")
        if not word.startswith("--"):
            raise InvalidInputError(f"{path}: {word!r} is not a Megatron-LM flag (flags start with --)")
        name, equals, value = word.partition("=")
        values = [value] if equals else []
        index += 1
        while not equals and index < len(args) and not args[index].startswith("--"):
            values.append(args[index])
            index += 1
        name = RETIRED_FLAGS.get(name, name) if name not in _KNOWN else name
        if word.partition("=")[0] in RETIRED_FLAGS:
            flags.notes.append(f"{word.partition('=')[0]} is Megatron-LM's older spelling of {name}; read as it")
        kind = _KNOWN.get(name)
        if kind is not None:
            if kind == "flag" and values:
                unassigned = [v for v in values if v.startswith(_UNASSIGNED)]
                if unassigned:  # the words after a switch: a variable the line needs
                    raise InvalidInputError(f"{unassigned[0][1:]} is never assigned in {path}, and the line needs "
                                            "it (pipeplan runs no shell: write its flags out, or assign it in the file)")
                raise InvalidInputError(f"{name} takes no value, got {' '.join(values)!r}")
            if kind != "flag" and not values:
                raise InvalidInputError(f"{name} needs a value")
            flags.values[name] = values
        elif name in REFUSED_FLAGS:
            default, what = REFUSED_FLAGS[name]
            if not (default and values == [default]):
                raise InvalidInputError(f"{' '.join([name] + values)}: {what}")
            flags.ignored.append(" ".join([name] + values))
        elif name in IGNORED_FLAGS:
            flags.ignored.append(" ".join([name] + [v.lstrip(_UNASSIGNED) for v in values]))
        else:
            close = difflib.get_close_matches(name, known, n=1, cutoff=_NEAR_MISS_CUTOFF)
            if close:
                raise InvalidInputError(f"{name} is not a Megatron-LM flag (did you mean {close[0]}?)")
            flags.ignored.append(" ".join([name] + [v.lstrip(_UNASSIGNED) for v in values]) + " " + _NOT_A_FLAG)
    return flags


# ---------------------------------------------------------------------------------------------- the launcher
def _world(launcher: Sequence[str], path: str, notes: list[str]) -> dict[str, Setting]:
    """``gpus`` and ``gpus_per_node`` from the launcher's options (none when it gives no count)."""
    found: dict[str, tuple[str, str]] = {}
    index = 0
    while index < len(launcher):
        word = launcher[index]
        name, equals, value = word.partition("=")
        if name in LAUNCHER_FLAGS:
            if not equals:
                value = launcher[index + 1] if index + 1 < len(launcher) else ""
                index += 1
            found[LAUNCHER_FLAGS[name]] = (name, value)
        index += 1
    if "per_node" not in found:
        if any(_is_python(w) for w in launcher[:1]) and len(launcher) <= 2 and "-m" not in launcher:
            return {"gpus": Setting(1, f"{path}: python runs one process"),
                    "gpus_per_node": Setting(1, f"{path}: python runs one process")}
        return {}
    settings: dict[str, Setting] = {}
    counts: dict[str, int] = {}
    for role, (name, value) in found.items():
        if value.startswith(_UNASSIGNED):
            notes.append(f"{name} is {value[1:]}, never assigned in {path}: the world size is left open")
            return {}
        try:
            counts[role] = int(value)
        except ValueError:
            notes.append(f"{name} {value} is not a number of processes: the world size is left open")
            return {}
        if counts[role] < 1:
            raise InvalidInputError(f"{name} must be an integer >= 1, got {value}")
    per_node_flag = found["per_node"][0]
    nodes = counts.get("nodes", 1)
    text = f"{per_node_flag} {counts['per_node']}" + (f" {found['nodes'][0]} {nodes}" if "nodes" in found else "")
    settings["gpus_per_node"] = Setting(counts["per_node"], f"{path}: {per_node_flag} {counts['per_node']}")
    settings["gpus"] = Setting(counts["per_node"] * nodes, f"{path}: {text}")
    return settings


# ---------------------------------------------------------------------------------------------- the split
def _layout_stages(layout: str) -> list[str]:
    """Megatron-LM's ``--pipeline-model-parallel-layout`` unrolled, one string of ``E``/``t``/``L`` per stage.

    The grammar of ``PipelineParallelLayerLayout.parse_str_to_list`` (commas cosmetic, ``(...)*n`` and
    ``x*n`` repeat, ``|`` ends a stage), restated.
    """
    text = layout.replace(",", "")
    text = re.sub(r"\(([^)]+)\)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    text = re.sub(r"(.)\*(\d+)", lambda m: m.group(1) * int(m.group(2)), text)
    stages = text.split("|")
    for stage in stages:
        bad = set(stage) - set("EtL")
        if bad:
            raise InvalidInputError(f"--pipeline-model-parallel-layout {layout}: {''.join(sorted(bad))!r} is not a "
                                    "layer pipeplan plans (E embedding, t decoder layer, L loss)")
    return stages


def _split(flags: _Flags, pp: int, settings: dict[str, Setting]) -> None:
    """``virtual_stages``, ``layers_per_stage`` and ``schedule`` from the split flags (pipeplan's layers)."""
    layout = "--pipeline-model-parallel-layout"
    per_virtual = "--num-layers-per-virtual-pipeline-stage"
    per_rank = "--num-virtual-stages-per-pipeline-rank"
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    account_e, account_l = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
    chosen = [f for f in (layout, per_virtual, per_rank) if flags.given(f)]
    if len(chosen) > 1:  # validate_args: no more than one of them
        raise InvalidInputError(f"{' and '.join(chosen)} are given together; Megatron-LM takes one of them")
    layers = flags.integer("--num-layers") if flags.given("--num-layers") else None
    virtual = 1
    sizes: tuple[int, ...] | None = None
    source = ""
    if flags.given(layout):
        stages = _layout_stages(flags.one(layout))
        if len(stages) % pp:
            raise InvalidInputError(f"{layout} has {len(stages)} stages, not a multiple of "
                                    f"--pipeline-model-parallel-size {pp}")
        joined = "".join(stages)
        if joined.count("E") != 1 or not stages[0].startswith("E") or joined.count("L") != 1 \
                or not stages[-1].endswith("L"):
            raise InvalidInputError(f"{layout}: pipeplan reads layouts with the embedding (E) first on stage 0 and "
                                    "the loss (L) last on the last stage")
        if any(not stage for stage in stages):
            raise InvalidInputError(f"{layout}: a stage with no layers; pipeplan's stages hold one layer or more")
        if layers is not None and joined.count("t") != layers:
            raise InvalidInputError(f"{layout} holds {joined.count('t')} decoder layers, --num-layers is {layers}")
        virtual = len(stages) // pp
        sizes = tuple(len(stage) for stage in stages)
        source = flags.source(layout)
    else:
        if flags.given(per_rank):
            virtual = flags.integer(per_rank)
        if (flags.given(first) or flags.given(last)) and (flags.given(account_e) or flags.given(account_l)):
            raise InvalidInputError(f"pipeplan does not read {first}/{last} with {account_e}/{account_l} yet; "
                                    f"write the split as {layout}")
        if (flags.given(first) or flags.given(last)) and (virtual > 1 or flags.given(per_virtual)):
            raise InvalidInputError(f"pipeplan reads {first}/{last} without virtual stages only; "
                                    f"write the split as {layout}")
        if layers is not None:
            sizes, virtual, source = _counted_split(flags, layers, pp, virtual)
    if virtual > 1 and pp == 1:
        raise InvalidInputError("virtual pipeline stages need --pipeline-model-parallel-size > 1")
    settings["virtual_stages"] = Setting(virtual, _virtual_source(flags, virtual))
    schedule = "interleaved" if virtual > 1 else "1f1b"
    settings["schedule"] = Setting(schedule, f"{flags.path}: Megatron-LM runs interleaved 1F1B with virtual stages"
                                   if virtual > 1 else f"{flags.path}: Megatron-LM runs 1F1B without virtual stages")
    if sizes is not None:
        settings["layers_per_stage"] = Setting(sizes, source)
    else:
        flags.notes.append("the line gives no --num-layers: the split (layers per stage) is left open")


def _virtual_source(flags: _Flags, virtual: int) -> str:
    for flag in ("--pipeline-model-parallel-layout", "--num-layers-per-virtual-pipeline-stage",
                 "--num-virtual-stages-per-pipeline-rank"):
        if flags.given(flag):
            return flags.source(flag, "--num-layers", "--pipeline-model-parallel-size")
    return flags.default("--num-virtual-stages-per-pipeline-rank", "(no virtual stages)")


def _counted_split(flags: _Flags, layers: int, pp: int, virtual: int) -> tuple[tuple[int, ...], int, str]:
    """The split Megatron-LM makes from counts (``validate_args`` and ``get_num_layers_to_build``), in pipeplan's
    layers: the embedding one more layer on stage 0, the loss one more on the last stage."""
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    account_e, account_l = "--account-for-embedding-in-pipeline-split", "--account-for-loss-in-pipeline-split"
    per_virtual = "--num-layers-per-virtual-pipeline-stage"
    if flags.given(first) or flags.given(last):
        counts = _first_last(flags, layers, pp)
        decoders = list(counts)
        source = flags.source("--num-layers", first, last)
    else:
        with_e, with_l = flags.given(account_e), flags.given(account_l)
        total = layers + with_e + with_l
        if total % pp:
            raise InvalidInputError(
                f"--num-layers {layers}{' + the embedding' * with_e}{' + the loss' * with_l} = {total} does not "
                f"divide by --pipeline-model-parallel-size {pp} (Megatron-LM refuses it)")
        if flags.given(per_virtual):
            chunk = flags.integer(per_virtual)
            if (total // pp) % chunk:
                raise InvalidInputError(f"{per_virtual} {chunk} does not divide the {total // pp} layers per "
                                        "pipeline rank (Megatron-LM refuses it)")
            virtual = total // pp // chunk
        stages = pp * virtual
        if total % stages:
            raise InvalidInputError(f"{total} layers do not divide over {pp} × {virtual} virtual stages")
        per = total // stages
        decoders = [per] * stages
        decoders[0] -= with_e
        decoders[-1] -= with_l
        if min(decoders) < 0 or (stages > 1 and min(decoders[1:-1] or [1]) < 1):
            raise InvalidInputError(f"--num-layers {layers} leaves a stage without layers over {stages} stages")
        source = flags.source("--num-layers", "--pipeline-model-parallel-size", account_e, account_l, per_virtual,
                              "--num-virtual-stages-per-pipeline-rank")
    sizes = list(decoders)
    sizes[0] += 1
    sizes[-1] += 1
    if min(sizes) < 1:
        raise InvalidInputError(f"--num-layers {layers} leaves a pipeline stage without layers")
    return tuple(sizes), virtual, source


def _first_last(flags: _Flags, layers: int, pp: int) -> list[int]:
    """Decoder layers per rank with ``--decoder-first/last-pipeline-num-layers`` (the other ranks share the rest
    equally; validate_args requires it to divide)."""
    first, last = "--decoder-first-pipeline-num-layers", "--decoder-last-pipeline-num-layers"
    head = flags.integer(first, 0) if flags.given(first) else None
    tail = flags.integer(last, 0) if flags.given(last) else None
    if pp == 1:
        raise InvalidInputError(f"{first}/{last} need --pipeline-model-parallel-size > 1")
    middle_ranks = pp - (head is not None) - (tail is not None)
    rest = layers - (head or 0) - (tail or 0)
    if rest < 0 or (middle_ranks == 0 and rest) or (middle_ranks and rest % middle_ranks):
        raise InvalidInputError(f"--num-layers {layers} minus {first}/{last} does not divide over the other "
                                f"{middle_ranks} pipeline ranks (Megatron-LM refuses it)")
    share = rest // middle_ranks if middle_ranks else 0
    return [share if head is None else head] + [share] * (pp - 2) + [share if tail is None else tail]


# ---------------------------------------------------------------------------------------------- the knobs
def _knobs(flags: _Flags, tp: int, settings: dict[str, Setting]) -> None:
    """dp_mode, grad_sync, recompute, sequence_parallel, tp_comm_overlap, precision and seq_length."""
    distributed = "--use-distributed-optimizer"
    settings["dp_mode"] = (Setting("zero1", flags.source(distributed)) if flags.given(distributed) else
                           Setting("ddp", flags.default(distributed, "(DDP: optimizer state on every rank)")))
    overlap = "--overlap-grad-reduce"
    if flags.given(overlap):
        settings["grad_sync"] = Setting("megatron-overlap", flags.source(overlap, "--overlap-param-gather"))
        if flags.given(distributed) and not flags.given("--overlap-param-gather"):
            flags.notes.append("--overlap-grad-reduce without --overlap-param-gather: priced as both overlapped "
                               "(the parameter all-gather's exposure is not priced separately)")
    else:
        settings["grad_sync"] = Setting("megatron", flags.default(overlap, "(gradients reduced after the backward)"))
    if flags.given("--overlap-param-gather") and not flags.given(distributed):
        raise InvalidInputError("--overlap-param-gather needs --use-distributed-optimizer (Megatron-LM refuses it)")
    settings["recompute"] = _recompute(flags)
    sequence = "--sequence-parallel"
    if flags.given(sequence) and tp == 1:
        settings["sequence_parallel"] = Setting("off", f"{flags.source(sequence)} (Megatron-LM turns it off at tp 1)")
    elif flags.given(sequence):
        settings["sequence_parallel"] = Setting("on", flags.source(sequence))
    else:
        settings["sequence_parallel"] = Setting("off", flags.default(sequence))
    overlap_tp = "--tp-comm-overlap"
    if flags.given(overlap_tp):
        if settings["sequence_parallel"].value != "on":  # validate_args, after turning it off at tp 1
            raise InvalidInputError("--tp-comm-overlap needs --sequence-parallel with --tensor-model-parallel-size "
                                    "> 1 (Megatron-LM refuses it)")
        settings["tp_comm_overlap"] = Setting("on", flags.source(overlap_tp))
    else:
        settings["tp_comm_overlap"] = Setting("backward", flags.default(
            overlap_tp, "(the backward's tensor-parallel collectives overlap the weight-gradient GEMMs)"))
    _grad_reduce(flags, settings)
    if flags.given("--bf16") and flags.given("--fp16"):
        raise InvalidInputError("--bf16 and --fp16 are given together; Megatron-LM takes one")
    if flags.given("--bf16") or flags.given("--fp16"):
        precision = "bf16" if flags.given("--bf16") else "fp16"
        settings["precision"] = Setting(precision, flags.source(f"--{precision}"))
    else:
        settings["precision"] = Setting("fp32", flags.default("--bf16 or --fp16", "(fp32)"))
    if flags.given("--seq-length"):
        settings["seq_length"] = Setting(flags.integer("--seq-length"), flags.source("--seq-length"))
    low = [entry.split()[0] for entry in flags.ignored if entry.startswith(("--fp8-format", "--fp4-format"))]
    if low:
        flags.notes.append(f"{' '.join(low)}: priced at {settings['precision'].value} (pipeplan does not price "
                           "FP8/FP4 matrix multiplies)")


def _grad_reduce(flags: _Flags, settings: dict[str, Setting]) -> None:
    """``grad_reduce_dtype`` where the line gives it: ``--grad-reduce-in-bf16`` (bf16; it wins, as
    ``validate_args`` sets ``accumulate_allreduce_grads_in_fp32 = False`` then) or
    ``--accumulate-allreduce-grads-in-fp32`` (fp32, which ``megatron/training/training.py`` passes on as
    ``DistributedDataParallelConfig.grad_reduce_in_fp32``). Neither: left open (each mode's own dtype)."""
    for flag, dtype in (("--grad-reduce-in-bf16", "bf16"), ("--accumulate-allreduce-grads-in-fp32", "fp32")):
        if flags.given(flag):
            settings["grad_reduce_dtype"] = Setting(dtype, flags.source(flag))
            return


def _recompute(flags: _Flags) -> Setting:
    granularity, method, count = "--recompute-granularity", "--recompute-method", "--recompute-num-layers"
    modules = "--recompute-modules"
    if flags.given(granularity):
        mode = flags.one(granularity)
        if mode not in _RECOMPUTE_GRANULARITY:
            raise InvalidInputError(f"{granularity} must be one of {', '.join(_RECOMPUTE_GRANULARITY)}, got {mode!r}")
    elif flags.given("--recompute-activations"):  # validate_args: sets granularity selective
        mode = "selective"
        return Setting(mode, flags.source("--recompute-activations") + " (Megatron-LM's older spelling of "
                       "--recompute-granularity selective)")
    else:
        if flags.given(method) or flags.given(count):
            flags.notes.append(f"{method}/{count} without {granularity} do nothing in Megatron-LM")
        return Setting("none", flags.default(granularity, "(no recompute)"))
    if mode == "selective":
        if flags.given(method) or flags.given(count):  # validate_args and TransformerConfig refuse them
            raise InvalidInputError(f"{granularity} selective takes no {method} or {count} (Megatron-LM refuses it)")
        listed = flags.values.get(modules, ["core_attn"])
        if listed != ["core_attn"]:
            flags.notes.append(f"{modules} {' '.join(listed)}: pipeplan prices selective recompute as the attention "
                               "core's (core_attn) only")
        return Setting(mode, flags.source(granularity, modules))
    how = flags.one(method) if flags.given(method) else ""
    if how and how not in _RECOMPUTE_METHOD:
        raise InvalidInputError(f"{method} must be one of {', '.join(_RECOMPUTE_METHOD)}, got {how!r}")
    if not how or not flags.given(count):  # TransformerConfig.__post_init__ refuses full without them
        raise InvalidInputError(f"{granularity} full needs {method} uniform or block and {count} "
                                "(Megatron-LM refuses it)")
    layers = flags.integer(count)  # at least 1, as TransformerConfig asks
    # block N: the first N layers of each stage (each virtual chunk) checkpointed one by one, the rest not;
    # uniform N: groups of N checkpointed whole (pipeplan.plan.stage_recompute; uniform 1 is pipeplan's full)
    mode = "full" if how == "uniform" and layers == 1 else f"{how}:{layers}"
    return Setting(mode, flags.source(granularity, method, count))


# ---------------------------------------------------------------------------------------------- the model
def _model(flags: _Flags, tp: int, name: str) -> tuple[ModelSpec | None, str]:
    """The GPT the shape flags describe, as ``benchmarks/engine_fidelity.py`` builds one; ``None`` without a shape."""
    missing = [flag for flag in _SHAPE if not flags.given(flag)]
    shape_given = [flag for flag in _SHAPE[1:] if flags.given(flag)]
    if missing:
        if shape_given:
            flags.notes.append(f"no model read: the line gives {', '.join(shape_given)} but not {', '.join(missing)}")
        return None, ""
    used = list(_SHAPE)
    layers, hidden, heads, seq = (flags.integer(flag) for flag in _SHAPE)
    vocab, vocab_flags = _vocabulary(flags, tp)
    used += vocab_flags
    ffn = flags.integer("--ffn-hidden-size") if flags.given("--ffn-hidden-size") else None
    gated = flags.given("--swiglu")
    if ffn is None:  # validate_args: 4h, or 2/3 of it rounded down to a multiple of 64 with SwiGLU
        ffn = int((4 * hidden * 2 / 3) / 64) * 64 if gated else 4 * hidden
    kv_heads = None
    if flags.given("--group-query-attention"):
        kv_heads = flags.integer("--num-query-groups") if flags.given("--num-query-groups") else 1
    head_dim = flags.integer("--kv-channels") if flags.given("--kv-channels") else None
    if head_dim is None and hidden % heads:
        raise InvalidInputError(f"--num-attention-heads {heads} does not divide --hidden-size {hidden}; "
                                "give --kv-channels")
    if head_dim == hidden // heads and not hidden % heads:
        head_dim = None
    norm = flags.one("--normalization") if flags.given("--normalization") else "LayerNorm"
    norms: dict[str, Norm] = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
    if norm not in norms:
        raise InvalidInputError(f"--normalization must be LayerNorm or RMSNorm, got {norm!r}")
    position = flags.one("--position-embedding-type") if flags.given("--position-embedding-type") else "learned_absolute"
    if flags.given("--use-rotary-position-embeddings"):
        position = "rope"
    if flags.given("--no-position-embedding") and position != "rope":  # validate_args raises for it
        raise InvalidInputError("--no-position-embedding without rope: Megatron-LM refuses it (deprecated); "
                                "use --position-embedding-type none")
    positions_known = ("learned_absolute", "rope", "yarn", "mrope", "relative", "none")
    if position not in positions_known:
        raise InvalidInputError(f"--position-embedding-type must be one of {', '.join(positions_known)}, "
                                f"got {position!r}")
    position_tokens = 0
    if position == "learned_absolute":
        position_tokens = flags.integer("--max-position-embeddings") if flags.given("--max-position-embeddings") else seq
        if not flags.given("--max-position-embeddings"):
            flags.notes.append("--max-position-embeddings not given: the learned position table is taken as "
                               "--seq-length rows (Megatron-LM requires the flag)")
    elif position == "relative":
        flags.notes.append("--position-embedding-type relative: its bias table is not priced")
    hidden_dropout = flags.number("--hidden-dropout") if flags.given("--hidden-dropout") else 0.1
    attention_dropout = flags.number("--attention-dropout") if flags.given("--attention-dropout") else 0.1
    dropout = hidden_dropout > 0 or attention_dropout > 0
    attention = _attention(flags)
    tied = not flags.given("--untie-embeddings-and-output-weights")
    used += [flag for flag in MODEL_FLAGS if flags.given(flag) and flag not in used]
    spec = ModelSpec(name, (
        Embedding(name="embedding", vocab_size=vocab, hidden_size=hidden, tokens=seq, position_tokens=position_tokens,
                  dropout=hidden_dropout > 0),
        TransformerStack(name="decoder", num_layers=layers, hidden_size=hidden, num_heads=heads, seq_length=seq,
                         ffn_hidden_size=ffn, num_kv_heads=kv_heads, head_dim=head_dim, gated_mlp=gated,
                         norm=norms[norm], bias=not flags.given("--disable-bias-linear"), dropout=dropout,
                         causal=True, attention=attention, final_norm=True),
        LMHead(name="output_layer", vocab_size=vocab, hidden_size=hidden, tokens=seq,
               tied_to="embedding" if tied else None),
    ), description=f"Megatron-LM GPT read from {flags.path}")
    return spec, " ".join(flags.text(flag) for flag in used if flags.given(flag))


def _attention(flags: _Flags) -> Attention:
    """``flash`` or ``eager``: Megatron-LM with Transformer Engine (its default ``--transformer-impl``) and
    ``--attention-backend auto`` (the default) runs a fused/flash kernel; ``unfused`` and ``local`` do not."""
    impl = flags.one("--transformer-impl") if flags.given("--transformer-impl") else "transformer_engine"
    backend = flags.one("--attention-backend") if flags.given("--attention-backend") else "auto"
    backends = ("flash", "fused", "unfused", "local", "auto")
    if backend not in backends:
        raise InvalidInputError(f"--attention-backend must be one of {', '.join(backends)}, got {backend!r}")
    if backend in ("unfused", "local") or (impl == "local" and backend == "auto"):
        return "flash" if flags.given("--use-flash-attn") else "eager"
    return "flash"


def _vocabulary(flags: _Flags, tp: int) -> tuple[int, list[str]]:
    """The padded vocabulary (``vocab_size_with_padding``: up to a multiple of --make-vocab-size-divisible-by × tp)."""
    if flags.given("--padded-vocab-size"):
        return flags.integer("--padded-vocab-size"), ["--padded-vocab-size"]
    used = []
    if flags.given("--vocab-size"):
        size = flags.integer("--vocab-size")
        used.append("--vocab-size")
    elif flags.given("--tokenizer-type") and flags.one("--tokenizer-type") in TOKENIZER_VOCAB:
        size = TOKENIZER_VOCAB[flags.one("--tokenizer-type")]
        used.append("--tokenizer-type")
    else:
        what = (f"--tokenizer-type {flags.one('--tokenizer-type')}" if flags.given("--tokenizer-type")
                else "no --tokenizer-type")
        raise InvalidInputError(f"{flags.path} gives the GPT's shape but not its vocabulary ({what}, whose size "
                                "pipeplan does not know): give --vocab-size")
    if flags.given("--no-pad-vocab-size"):
        return size, used + ["--no-pad-vocab-size"]
    divisor = flags.integer("--make-vocab-size-divisible-by") if flags.given("--make-vocab-size-divisible-by") else 128
    if flags.given("--make-vocab-size-divisible-by"):
        used.append("--make-vocab-size-divisible-by")
    multiple = divisor * tp
    return math.ceil(size / multiple) * multiple, used


# ---------------------------------------------------------------------------------------------- the reader
def _other_engine(path: Path, text: str) -> None:
    """Refuse a DeepSpeed JSON or torchtitan TOML config given as a Megatron-LM line (one line naming the option)."""
    stripped = text.lstrip()
    looks_json = path.suffix == ".json"
    if not looks_json and stripped.startswith("{"):
        try:
            looks_json = isinstance(json.loads(text), dict)
        except ValueError:
            looks_json = False
    if looks_json:
        raise InvalidInputError(f"{path} looks like a DeepSpeed config (JSON), not a Megatron-LM launch line: "
                                "give it with --deepspeed-config")
    looks_toml = path.suffix == ".toml"
    if not looks_toml and re.search(r"^\s*\[[A-Za-z_.]+\]\s*$", text, re.M):  # a [table] and no flag
        looks_toml = not re.search(r"(^|\s)--[A-Za-z]", text)
    if looks_toml:
        raise InvalidInputError(f"{path} looks like a torchtitan config (TOML), not a Megatron-LM launch line: "
                                "give it with --torchtitan-config")


def read_megatron_args(path: Path) -> RunConfig:
    """The Megatron-LM run ``path`` describes: a launch line, a launch script, or pipeplan's ``megatron_args.sh``.

    Args:
        path: a file, or the directory an export wrote (its ``megatron_args.sh``).

    Returns:
        a :class:`RunConfig` (engine ``"megatron"``): the fields the flags fix, Megatron-LM's defaults for the
        ones they leave out (sources say so), the GPT when the line gives its shape, the flags read and not
        priced in ``ignored``.

    Raises:
        InvalidInputError: one line: a variable the line needs that the file never assigns, a near-miss
            of a flag, a value Megatron-LM refuses (a non-positive degree, a global batch that does not
            divide, tp·pp not dividing the world size, an unknown recompute granularity), something pipeplan
            does not plan (context or expert parallelism), or a DeepSpeed/torchtitan config.
    """
    given = str(path)
    path = Path(path)
    if path.is_dir():
        if not (path / "megatron_args.sh").is_file():
            raise InvalidInputError(f"{path} is a directory without megatron_args.sh; give the launch script")
        path = path / "megatron_args.sh"
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise InvalidInputError(f"{path}: cannot read it ({error})") from None
    name = str(path)
    _other_engine(path, text)
    script = _parse_script(text, name)
    line = _launch_line(script)
    flags = _collect(line.args, name)
    settings: dict[str, Setting] = {}
    notes: list[str] = []
    settings.update(_world(line.launcher, name, notes))
    tp_flag, pp_flag = "--tensor-model-parallel-size", "--pipeline-model-parallel-size"
    tp = flags.integer(tp_flag) if flags.given(tp_flag) else 1
    pp = flags.integer(pp_flag) if flags.given(pp_flag) else 1
    settings["tp"] = Setting(tp, flags.source(tp_flag) if flags.given(tp_flag) else flags.default(tp_flag, "(1)"))
    settings["pp"] = Setting(pp, flags.source(pp_flag) if flags.given(pp_flag) else flags.default(pp_flag, "(1)"))
    _split(flags, pp, settings)
    micro_flag, global_flag = "--micro-batch-size", "--global-batch-size"
    micro = flags.integer(micro_flag) if flags.given(micro_flag) else None
    if micro is not None:
        settings["micro_batch_size"] = Setting(micro, flags.source(micro_flag))
    gpus = settings["gpus"].value if "gpus" in settings else None
    dp = None
    if gpus is not None:
        if gpus % (tp * pp):
            raise InvalidInputError(f"tp {tp} × pp {pp} = {tp * pp} does not divide the {gpus} GPUs the launcher "
                                    f"starts ({settings['gpus'].source})")
        dp = gpus // (tp * pp)
    if flags.given(global_flag):
        global_batch = flags.integer(global_flag)
        settings["global_batch"] = Setting(global_batch, flags.source(global_flag))
        if micro is not None and dp is not None:
            if global_batch % (micro * dp):
                raise InvalidInputError(f"{global_flag} {global_batch} is not divisible by {micro_flag} {micro} × "
                                        f"data-parallel {dp} (Megatron-LM refuses it)")
            settings["num_microbatches"] = Setting(global_batch // (micro * dp), f"{name}: {global_flag} "
                                                   f"{global_batch} / ({micro_flag} {micro} × data-parallel {dp})")
    elif micro is not None and dp is not None:  # Megatron-LM: the global batch defaults to micro × dp
        settings["global_batch"] = Setting(micro * dp, flags.default(global_flag, f"({micro_flag} × data-parallel)"))
        settings["num_microbatches"] = Setting(1, flags.default(global_flag, "(one microbatch per step)"))
    _knobs(flags, tp, settings)
    model, model_source = _model(flags, tp, path.stem)
    return RunConfig("megatron", given, settings, model, model_source, tuple(flags.ignored),
                     tuple(notes + flags.notes))

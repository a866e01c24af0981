"""A Megatron-LM launch script split into shell words, its launch line found, and the world size its launcher starts.

    from pipeplan.engines._megatron_shell import _launch_line, _parse_script, _world
    script = _parse_script("N=8\\ntorchrun --nproc-per-node $N pretrain_gpt.py --bf16\\n", "train.sh")
    line = _launch_line(script)
    line.launcher, line.args                    # (['torchrun', '--nproc-per-node', '8'], ['--bf16'])
    _world(line.launcher, "train.sh", [])   # {'gpus_per_node': Setting(value=8, ...), 'gpus': Setting(value=8, ...)}

The file is never run: :mod:`shlex` splits it. Comments, backslash-continued lines and the
variables the file assigns (``X=...``, arrays ``X=(...)``, ``${X:-default}``) are handled
as bash would; a variable the file never assigns, or a command substitution, marks the
words it is in (:data:`_UNASSIGNED`), and the flag reader (:mod:`._megatron_flags`)
refuses such a word where the line needs its value. The launch line is the command with
the most Megatron-LM flags (:mod:`._megatron_vocab`), or pipeplan's own ``LINE='...'``.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from ..errors import InvalidInputError
from ._megatron_vocab import IGNORED_FLAGS, LAUNCHER_FLAGS, MODEL_FLAGS, PRICED_FLAGS, REFUSED_FLAGS
from .run_config import Setting

_LAUNCHERS = ("torchrun", "deepspeed")
_UNASSIGNED = "\x00"  # marks a variable the file never assigns


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

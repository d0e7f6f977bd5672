"""Shell words with their positions: quotes, `\\` continuations, comments, $VAR / ${VAR:-default}.

Not a shell: enough of POSIX word splitting to find `python -m sglang.launch_server …` and
`sglang serve …` and where each argument was written. A value that depends on a variable the
file does not set keeps its text and names the variable (Word.unresolved).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional, Sequence

from nsa_policy.lint.tree import ParseError

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_SEPARATORS = "\n;&|()"
_ARRAY_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\[(@|\*|\d{1,6})\]\}")
_ARRAY_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)(\+?)=$")


@dataclass
class Word:
    text: str
    start: int  # absolute offset of the first character
    end: int  # absolute offset after the last character
    unresolved: Optional[str] = None
    quoted: bool = False


MAX_EXPANSION_DEPTH = 32  # ${A:-${B:-…}} nesting; real files use one or two levels


class Expander:
    """Variable values known in this file; `${VAR:=x}` assigns. Arrays (`A=(…)`) are kept apart."""

    def __init__(self, variables: Optional[dict[str, str]] = None, arrays: Optional[dict[str, list[str]]] = None):
        self.vars: dict[str, str] = dict(variables or {})
        self.arrays: dict[str, list[str]] = {k: list(v) for k, v in (arrays or {}).items()}
        self.depth = 0
        # compose reads `$$` as one literal `$`, which the container's shell then expands
        self.compose = False

    def copy(self) -> Expander:
        other = Expander(self.vars, self.arrays)
        other.compose = self.compose
        return other

    def expand_plain(self, text: str) -> tuple[str, Optional[str]]:
        """Expand $VAR forms in a string that has no positions of interest (defaults, env files)."""
        self.depth += 1
        try:
            if self.depth > MAX_EXPANSION_DEPTH:
                raise ParseError(f"a ${{…}} expansion nests deeper than {MAX_EXPANSION_DEPTH} levels; refused")
            out: list[str] = []
            missing: Optional[str] = None
            i, n = 0, len(text)
            while i < n:
                c = text[i]
                if c == "$":
                    val, i, miss = self.dollar(text, i)
                    out.append(val)
                    missing = missing or miss
                else:
                    out.append(c)
                    i += 1
            return "".join(out), missing
        finally:
            self.depth -= 1

    def array(self, text: str, i: int) -> Optional[tuple[Optional[list[str]], int, Optional[str]]]:
        """`${NAME[@]}` / `${NAME[*]}` at text[i]: (its elements or None when unknown, next index, missing)."""
        m = _ARRAY_REF.match(text, i)
        if m is None:
            return None
        name, sub = m.group(1), m.group(2)
        if name not in self.arrays:
            return None, m.end(), "${" + name + "[" + sub + "]}"
        items = self.arrays[name]
        if sub in ("@", "*"):
            return list(items), m.end(), None
        k = int(sub)
        return ([items[k]] if k < len(items) else []), m.end(), None

    def dollar(self, text: str, i: int) -> tuple[str, int, Optional[str]]:
        """Expand the expansion at text[i] == '$'; return (value, next index, missing variable)."""
        n = len(text)
        if i + 1 >= n:
            return "$", i + 1, None
        nxt = text[i + 1]
        if nxt == "$" and self.compose:
            if i + 2 < n and (text[i + 2] == "{" or _NAME.match(text, i + 2)):
                return self.dollar(text, i + 1)
            return "$", i + 2, None
        arr = self.array(text, i)
        if arr is not None:
            items, j, miss = arr
            return (" ".join(items) if items is not None else text[i:j]), j, miss
        if nxt == "{":
            depth, j = 1, i + 2
            while j < n and depth:
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                j += 1
            body = text[i + 2:j - 1]
            m = _NAME.match(body)
            if not m:
                return text[i:j], j, body or "${}"
            name, rest = m.group(0), body[m.end():]
            value = self.vars.get(name)
            for op in (":-", ":=", ":+", "-", "=", "+"):
                if rest.startswith(op):
                    word = rest[len(op):]
                    empty = value is None or (op.startswith(":") and value == "")
                    if op.endswith("+"):
                        return ("" if empty else self.expand_plain(word)[0]), j, None
                    if empty or value is None:
                        val, miss = self.expand_plain(word)
                        if op.endswith("="):
                            self.vars[name] = val
                        return val, j, miss
                    return value, j, None
            if rest:  # ${VAR%pattern} and friends: not modelled
                return text[i:j], j, name
            if value is None:
                return text[i:j], j, name
            return value, j, None
        if nxt == "(":
            depth, j = 1, i + 2
            while j < n and depth:
                if text[j] == "(":
                    depth += 1
                elif text[j] == ")":
                    depth -= 1
                j += 1
            return text[i:j], j, "$(" + text[i + 2:j - 1].strip()[:30] + ")"
        m = _NAME.match(text, i + 1)
        if m:
            name = m.group(0)
            value = self.vars.get(name)
            if value is None:
                return text[i:m.end()], m.end(), name
            return value, m.end(), None
        if nxt.isdigit() or nxt in "@*#?$!-":
            return text[i:i + 2], i + 2, "$" + nxt
        return "$", i + 1, None


def _matching_paren(text: str, i: int) -> int:
    """The index of the `)` closing the `(` at text[i] (quotes respected), or len(text)."""
    depth, j, n = 0, i, len(text)
    while j < n:
        c = text[j]
        if c == "\\":
            j += 2
            continue
        if c in "'\"":
            k = text.find(c, j + 1)
            j = n if k == -1 else k + 1
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return j
        j += 1
    return n


def split_commands(text: str, base: int, exp: Expander, on_command=None) -> list[list[Word]]:
    """Split shell text into simple commands of words. `on_command(words)` runs after each command,
    so that assignments it makes are visible to the commands after it (as in a shell).

    An unquoted expansion is split into words as the shell splits it (`$EXTRA` holding two flags is
    two words, placed where `$EXTRA` is written); `"${A[@]}"` is one word per element of the array
    `A=(…)`; an unquoted expansion that is empty is no word at all."""
    commands: list[list[Word]] = []
    words: list[Word] = []
    buf: list[str] = []
    start = -1
    unresolved: Optional[str] = None
    quoted = False
    in_word = False
    skip_next_word = False
    i, n = 0, len(text)

    def end_word(at: int) -> None:
        nonlocal buf, start, unresolved, quoted, in_word, skip_next_word
        if in_word:
            word = "".join(buf)
            if skip_next_word:
                skip_next_word = False
            elif word or quoted or unresolved:
                words.append(Word(word, base + start, base + at, unresolved, quoted))
        buf, start, unresolved, quoted, in_word = [], -1, None, False, False

    def end_command() -> None:
        nonlocal words
        if words:
            commands.append(words)
            if on_command is not None:
                on_command(words)
        words = []

    def begin(at: int) -> None:
        nonlocal start, in_word
        if not in_word:
            start, in_word = at, True

    def split_into(pieces: list[str], at: int, to: int, lead: bool, trail: bool, miss: Optional[str]) -> None:
        """Words from an unquoted expansion written at text[at:to]: the first piece joins the word being
        read unless the value starts with a blank, the last starts the next one unless it ends with one."""
        nonlocal unresolved
        if lead:
            end_word(at)
        for k, piece in enumerate(pieces):
            if k:
                end_word(to)
            begin(at)
            buf.append(piece)
            unresolved = unresolved or miss
        if trail:
            end_word(to)

    while i < n:
        c = text[i]
        if c == "\\":
            if i + 1 < n and text[i + 1] == "\n":
                i += 2
                continue
            if i + 2 < n and text[i + 1] == "\r" and text[i + 2] == "\n":
                i += 3
                continue
            begin(i)
            if i + 1 < n:
                buf.append(text[i + 1])
            i += 2
            continue
        if c in " \t\r":
            end_word(i)
            i += 1
            continue
        if c == "#" and not in_word:
            j = text.find("\n", i)
            i = n if j == -1 else j
            continue
        if c == "(" and in_word and not quoted and (am := _ARRAY_ASSIGN.match("".join(buf))):
            # NAME=(a b c): the array's elements, read as words (expansions included), kept for ${NAME[@]}
            j = _matching_paren(text, i)
            inner = split_commands(text[i + 1:j], base + i + 1, exp)
            items = [w.text for cmd in inner for w in cmd]
            name = am.group(1)
            exp.arrays[name] = (exp.arrays.get(name, []) if am.group(2) else []) + items
            buf, start, in_word = [], -1, False
            i = j + 1
            continue
        if c in "<>" or (c == "&" and i + 1 < n and text[i + 1] == ">"):
            if in_word and "".join(buf).isdigit():
                in_word, buf = False, []  # 2>… : the fd number is not a word
            end_word(i)
            while i < n and text[i] in "<>&":
                i += 1
            if i < n and text[i].isdigit() and text[i - 1] == "&":
                i += 1  # 2>&1
            else:
                skip_next_word = True  # the redirection target
            continue
        if c in _SEPARATORS:
            end_word(i)
            end_command()
            i += 1
            continue
        if c == "'":
            begin(i)
            quoted = True
            j = text.find("'", i + 1)
            j = n if j == -1 else j
            buf.append(text[i + 1:j])
            i = j + 1
            continue
        if c == '"':
            begin(i)
            quoted = True
            i += 1
            while i < n and text[i] != '"':
                d = text[i]
                if d == "\\" and i + 1 < n and text[i + 1] in '"\\$`\n':
                    if text[i + 1] != "\n":
                        buf.append(text[i + 1])
                    i += 2
                    continue
                if d == "$":
                    at = i + 1 if exp.compose and text.startswith("$${", i) else i  # compose: $$ is one $
                    arr = exp.array(text, at)
                    ref = _ARRAY_REF.match(text, at)
                    if arr is not None and arr[0] is not None and ref is not None and ref.group(2) == "@":
                        j = arr[1]
                        for k, item in enumerate(arr[0]):  # "${A[@]}": one word per element
                            if k:
                                end_word(j)
                                begin(i)
                                quoted = True
                            buf.append(item)
                        i = j
                        continue
                    val, i, miss = exp.dollar(text, i)
                    buf.append(val)
                    unresolved = unresolved or miss
                    continue
                buf.append(d)
                i += 1
            i += 1
            continue
        if c == "$":
            at = i
            begin(i)
            val, i, miss = exp.dollar(text, i)
            if miss is None and val and any(ch in val for ch in " \t\n"):
                split_into(val.split(), at, i, val[0] in " \t\n", val[-1] in " \t\n", None)
            else:
                buf.append(val)
                unresolved = unresolved or miss
            continue
        if c == "`":
            begin(i)
            j = text.find("`", i + 1)
            j = n if j == -1 else j
            buf.append(text[i:j + 1])
            unresolved = unresolved or "`…`"
            i = j + 1
            continue
        begin(i)
        buf.append(c)
        i += 1
    end_word(n)
    end_command()
    return commands


def assignment(word: Word) -> Optional[tuple[str, str]]:
    if word.quoted and not _ASSIGN.match(word.text):
        return None
    m = _ASSIGN.match(word.text)
    return (m.group(1), m.group(2)) if m else None


def find_launch(texts: Sequence[str]) -> Optional[tuple[str, int]]:
    """(the engine, the index of the server's first argument) of the first registered engine whose
    server command these words start, or None. Each engine says what its command looks like."""
    from nsa_policy import engines

    for engine in engines.every():
        start = engine.launch_start(list(texts))
        if start is not None:
            return engine.name, start
    return None


def mentions_launch(text: str) -> bool:
    """A cheap pre-filter: the text names a registered engine (`sglang.launch_server`, `vllm serve`)."""
    from nsa_policy import engines

    return any(name in text for name in engines.names())


def launch_from(engine: str, tokens: list, path: str, loc, kind: str, env: dict):
    """The Launch of `engine`'s server from the tokens ((text, location, unresolved)) after its command;
    words lint cannot see into ("$@") become the launch's `unseen` (NSA409), not arguments."""
    from nsa_policy import engines
    from nsa_policy.lint.report import Launch

    args = engines.get(engine).parse_cli(tokens)
    return Launch(path=path, loc=loc, kind=kind, engine=engine, env=env,
                  args=[a for a in args if a.style != "unseen"],
                  unseen=[(a.unresolved or a.spelling, a.loc) for a in args if a.style == "unseen"])


_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "ash", "mksh", "busybox"})
_SHELL_ARG_OPTIONS = frozenset({"-o", "+o", "-O", "+O", "--rcfile", "--init-file"})


def command_string(texts: Sequence[str]) -> Optional[int]:
    """Index of the command string a shell runs (`sh -c STR`, `bash -lc STR`, `sh -xc -- STR`,
    `bash --login -c STR`), or None when the words run no shell with -c."""
    for k, t in enumerate(texts):
        if t.rsplit("/", 1)[-1] not in _SHELLS:
            continue
        j = k + 1
        if t.endswith("busybox") and j < len(texts) and texts[j] in _SHELLS:
            j += 1
        seen_c = False
        while j < len(texts):
            w = texts[j]
            if w == "--":
                j += 1
                break
            if w in _SHELL_ARG_OPTIONS:
                j += 2
                continue
            if w.startswith("--"):
                j += 1
                continue
            if len(w) > 1 and w[0] in "-+":
                seen_c = seen_c or "c" in w[1:]
                j += 1
                continue
            break
        if seen_c and j < len(texts):
            return j
    return None

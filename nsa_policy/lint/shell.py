"""Shell words with their positions: quotes, `\\` continuations, comments, $VAR / ${VAR:-default}.

Not a shell: enough of POSIX word splitting to find `python -m sglang.launch_server …` and
`sglang serve …` and where each argument was written. A value that depends on a variable the
file does not set keeps its text and names the variable (Word.unresolved).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_ASSIGN = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", re.S)
_SEPARATORS = "\n;&|()"


@dataclass
class Word:
    text: str
    start: int  # absolute offset of the first character
    end: int  # absolute offset after the last character
    unresolved: Optional[str] = None
    quoted: bool = False


class Expander:
    """Variable values known in this file; `${VAR:=x}` assigns."""

    def __init__(self, variables: Optional[dict[str, str]] = None):
        self.vars: dict[str, str] = dict(variables or {})

    def expand_plain(self, text: str) -> tuple[str, Optional[str]]:
        """Expand $VAR forms in a string that has no positions of interest (defaults, env files)."""
        out: list[str] = []
        missing: Optional[str] = None
        i, n = 0, len(text)
        while i < n:
            c = text[i]
            if c == "$":
                val, i, miss = self._dollar(text, i)
                out.append(val)
                missing = missing or miss
            else:
                out.append(c)
                i += 1
        return "".join(out), missing

    def _dollar(self, text: str, i: int) -> tuple[str, int, Optional[str]]:
        """Expand the expansion at text[i] == '$'; return (value, next index, missing variable)."""
        n = len(text)
        if i + 1 >= n:
            return "$", i + 1, None
        nxt = text[i + 1]
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


def split_commands(text: str, base: int, exp: Expander, on_command=None) -> list[list[Word]]:
    """Split shell text into simple commands of words. `on_command(words)` runs after each command,
    so that assignments it makes are visible to the commands after it (as in a shell)."""
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
            if skip_next_word:
                skip_next_word = False
            else:
                words.append(Word("".join(buf), base + start, base + at, unresolved, quoted))
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
                    val, i, miss = exp._dollar(text, i)
                    buf.append(val)
                    unresolved = unresolved or miss
                    continue
                buf.append(d)
                i += 1
            i += 1
            continue
        if c == "$":
            begin(i)
            val, i, miss = exp._dollar(text, i)
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


def launch_start(words: list[Word]) -> Optional[int]:
    """Index of the first argument of an sglang server launch in a command, or None."""
    for k, w in enumerate(words):
        t = w.text
        if t == "sglang.launch_server" and k > 0 and words[k - 1].text == "-m":
            return k + 1
        if t.endswith("sglang/launch_server.py"):
            return k + 1
        if (t == "sglang" or t.endswith("/sglang")) and k + 1 < len(words) and words[k + 1].text == "serve":
            return k + 2
    return None


def vllm_launch_start(texts: list[str]) -> Optional[int]:
    """Index of the first argument of a vLLM server launch (`vllm serve …`,
    `python -m vllm.entrypoints.openai.api_server …`) in a command's words, or None."""
    for k, t in enumerate(texts):
        if (t == "vllm" or t.endswith("/vllm")) and k + 1 < len(texts) and texts[k + 1] == "serve":
            return k + 2
        if t == "vllm.entrypoints.openai.api_server" and k > 0 and texts[k - 1] == "-m":
            return k + 1
    return None


def mentions_launch(text: str) -> bool:
    return ("sglang.launch_server" in text or "launch_server.py" in text or "sglang serve" in text
            or "vllm serve" in text or "vllm.entrypoints.openai.api_server" in text)

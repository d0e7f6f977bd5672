"""Launches in shell text: scripts, Dockerfile shell-form commands, `sh -c` strings in manifests."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from nsa_policy.lint.confine import OutsideTree, Reader
from nsa_policy.lint.report import OUTSIDE_FIX, Diagnostic, EnvValue, FileScan, Launch, Location, finding
from nsa_policy.lint.shell import (
    Expander,
    Word,
    assignment,
    command_string,
    find_launch,
    launch_from,
    mentions_launch,
    split_commands,
)
from nsa_policy.lint.text import FixedIndex, LineIndex

_DECLARE = ("export", "declare", "typeset", "readonly", "local")
MAX_SOURCE_DEPTH = 2  # `source` inside a sourced file inside a sourced file: deeper ones are not followed
MAX_SHELL_DEPTH = 8  # sh -c "sh -c \"…\"" nesting


@dataclass
class ShellState:
    """What commands so far have set: variables, the exported environment, `set -a`."""

    exp: Expander = field(default_factory=Expander)
    env: dict[str, EnvValue] = field(default_factory=dict)
    assigned_at: dict[str, EnvValue] = field(default_factory=dict)
    auto_export: bool = False
    base_dir: Optional[str] = None
    depth: int = 0
    reader: Optional[Reader] = None
    # findings the extraction itself makes (a sourced file outside the linted tree), shared by nested states
    diagnostics: list[Diagnostic] = field(default_factory=list)

    def nested(self) -> ShellState:
        return ShellState(self.exp.copy(), dict(self.env), dict(self.assigned_at), self.auto_export, self.base_dir,
                          self.depth + 1, self.reader, self.diagnostics)


def launches_in_shell(chunk: str, base: int, index: LineIndex, path: str, state: ShellState,
                      kind: str = "shell") -> list[Launch]:
    found: list[Launch] = []

    def loc(w: Word) -> Location:
        return index.loc(path, w.start)

    def on_command(words: list[Word]) -> None:
        head = words[0].text
        if head == "set":
            for w in words[1:]:
                if w.text.startswith("-") and "a" in w.text[1:]:
                    state.auto_export = True
                elif w.text.startswith("+") and "a" in w.text[1:]:
                    state.auto_export = False
            return
        if head in _DECLARE:
            exported = head == "export" or any(w.text.startswith("-") and "x" in w.text for w in words[1:])
            for w in words[1:]:
                a = assignment(w)
                if a:
                    _assign(state, a[0], a[1], EnvValue(a[1], loc(w), w.unresolved), exported)
                elif exported and w.text in state.assigned_at:
                    state.env[w.text] = state.assigned_at[w.text]
            return
        if head in ("source", ".") and len(words) > 1:
            _source(words[1], state, loc(words[1]), path)
            return
        k = 0
        prefix: dict[str, EnvValue] = {}
        while k < len(words):
            a = assignment(words[k])
            if not a:
                break
            prefix[a[0]] = EnvValue(a[1], loc(words[k]), words[k].unresolved)
            k += 1
        if k == len(words):  # plain assignments
            for name, ev in prefix.items():
                _assign(state, name, ev.value, ev, state.auto_export)
            return
        texts = [w.text for w in words]
        hit = find_launch(texts)
        if hit is not None:
            engine, start = hit
            found.append(launch_from(engine, [(w.text, loc(w), w.unresolved) for w in words[start:]], path,
                                     loc(words[k]), kind, {**state.env, **prefix}))
            return
        j = command_string(texts)  # sh -c "python -m sglang.launch_server …", bash -lc, sh -xc -- …
        if j is not None and mentions_launch(words[j].text) and state.depth < MAX_SHELL_DEPTH:
            w = words[j]
            inner = state.nested()
            for la in launches_in_string(w, index, path, inner, kind):
                la.env = {**la.env, **prefix}
                found.append(la)

    split_commands(chunk, base, state.exp, on_command)
    return found


def launches_in_string(w: Word, index: LineIndex, path: str, state: ShellState, kind: str) -> list[Launch]:
    """The launches of a shell command string (the word after `-c`). Read from the file's own text, placed
    exactly, when the word is one quoted string the outer shell passes unchanged; otherwise from its value
    (the outer shell's quoting and escapes already applied), placed where the word starts."""
    raw = index.text[w.start:w.end] if not isinstance(index, FixedIndex) else ""
    simple = len(raw) >= 2 and raw[0] in "'\"" and raw[-1] == raw[0] and raw[1:-1] == w.text
    if simple:
        return launches_in_shell(raw[1:-1], w.start + 1, index, path, state, kind)
    return launches_in_shell(w.text, 0, FixedIndex(w.text, index.loc(path, w.start)), path, state, kind)


def _assign(state: ShellState, name: str, value: str, ev: EnvValue, exported: bool) -> None:
    state.exp.vars[name] = value
    state.assigned_at[name] = ev
    if exported or name in state.env:
        state.env[name] = ev


def _source(target_word: Word, state: ShellState, at: Location, path: str) -> None:
    """`source FILE` / `. FILE`: read its assignments, when the file is inside the linted tree. A path
    outside it is an NSA409 and is never opened; a device, a FIFO or a huge file is refused by the reader."""
    target = target_word.text
    if state.depth >= MAX_SOURCE_DEPTH or state.base_dir is None or target_word.unresolved or "$" in target:
        return
    full = os.path.normpath(os.path.join(state.base_dir, target))
    shown = target
    if state.reader is None:
        return
    try:
        text = state.reader.read(full, field="source", shown=shown)
    except OutsideTree:
        state.diagnostics.append(finding(
            "NSA409", f"'. {shown}' is outside the linted tree: lint never reads it; the variables it sets are "
                      f"unknown here", at, OUTSIDE_FIX))
        return
    except (OSError, ValueError):  # not a regular UTF-8 file within the size limit: nothing to read from it
        return
    sub = ShellState(state.exp, state.env, state.assigned_at, state.auto_export, os.path.dirname(full),
                     state.depth + 1, state.reader, state.diagnostics)
    rel = os.path.relpath(full) if not os.path.isabs(path) else full
    launches_in_shell(text, 0, LineIndex(text), rel, sub)
    state.auto_export = sub.auto_export


def scan_shell(path: str, text: str, index: LineIndex, base_dir: Optional[str],
               preset: Optional[dict[str, EnvValue]] = None, reader: Optional[Reader] = None) -> FileScan:
    state = ShellState(base_dir=base_dir, reader=reader)
    for name, ev in (preset or {}).items():
        state.exp.vars.setdefault(name, ev.value)
    scan = FileScan(path, launches_in_shell(text, 0, index, path, state))
    scan.diagnostics += state.diagnostics
    return scan

"""Launches in shell text: scripts, Dockerfile shell-form commands, `sh -c` strings in manifests."""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Optional

from nsa_policy.lint.cliargs import parse_cli
from nsa_policy.lint.report import EnvValue, FileScan, Launch
from nsa_policy.lint.shell import Expander, Word, assignment, launch_start, mentions_launch, split_commands, vllm_launch_start
from nsa_policy.lint.text import LineIndex

_DECLARE = ("export", "declare", "typeset", "readonly", "local")


@dataclass
class ShellState:
    """What commands so far have set: variables, the exported environment, `set -a`."""

    exp: Expander = field(default_factory=Expander)
    env: dict[str, EnvValue] = field(default_factory=dict)
    assigned_at: dict[str, EnvValue] = field(default_factory=dict)
    auto_export: bool = False
    base_dir: Optional[str] = None
    depth: int = 0


def launches_in_shell(chunk: str, base: int, index: LineIndex, path: str, state: ShellState,
                      kind: str = "shell") -> list[Launch]:
    found: list[Launch] = []

    def loc(w: Word):
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
            _source(words[1].text, state, index, path)
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
        start = launch_start(words)
        if start is not None:
            launch = Launch(path=path, loc=loc(words[k]), kind=kind,
                            args=parse_cli((w.text, loc(w), w.unresolved) for w in words[start:]),
                            env={**state.env, **prefix})
            found.append(launch)
            return
        vstart = vllm_launch_start([w.text for w in words])
        if vstart is not None:
            from nsa_policy.engines.vllm.lint import parse_vllm_cli

            found.append(Launch(path=path, loc=loc(words[k]), kind=kind, engine="vllm",
                                args=parse_vllm_cli([(w.text, loc(w), w.unresolved) for w in words[vstart:]]),
                                env={**state.env, **prefix}))
            return
        for j, w in enumerate(words):  # sh -c "python -m sglang.launch_server …"
            if w.quoted and j > 0 and words[j - 1].text == "-c" and mentions_launch(w.text):
                raw = index.text[w.start:w.end]
                if raw[:1] in "'\"" and raw[-1:] == raw[:1]:
                    inner = ShellState(Expander(state.exp.vars), dict(state.env), dict(state.assigned_at),
                                       state.auto_export, state.base_dir, state.depth + 1)
                    for la in launches_in_shell(raw[1:-1], w.start + 1, index, path, inner, kind):
                        la.env = {**la.env, **prefix}
                        found.append(la)

    split_commands(chunk, base, state.exp, on_command)
    return found


def _assign(state: ShellState, name: str, value: str, ev: EnvValue, exported: bool) -> None:
    state.exp.vars[name] = value
    state.assigned_at[name] = ev
    if exported or name in state.env:
        state.env[name] = ev


def _source(target: str, state: ShellState, index: LineIndex, path: str) -> None:
    """`source FILE` / `. FILE`: read its assignments when the file is beside the script."""
    if state.depth >= 2 or state.base_dir is None or "$" in target:
        return
    full = os.path.normpath(os.path.join(state.base_dir, target))
    try:
        with open(full, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError):
        return
    sub = ShellState(state.exp, state.env, state.assigned_at, state.auto_export, os.path.dirname(full), state.depth + 1)
    rel = os.path.relpath(full) if not os.path.isabs(path) else full
    launches_in_shell(text, 0, LineIndex(text), rel, sub)
    state.auto_export = sub.auto_export


def scan_shell(path: str, text: str, index: LineIndex, base_dir: Optional[str],
               preset: Optional[dict[str, EnvValue]] = None) -> FileScan:
    state = ShellState(base_dir=base_dir)
    for name, ev in (preset or {}).items():
        state.exp.vars.setdefault(name, ev.value)
    return FileScan(path, launches_in_shell(text, 0, index, path, state))

"""Launches in Dockerfiles: ENTRYPOINT and CMD (exec and shell forms), ENV and ARG per stage."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from nsa_policy.lint.cliargs import parse_cli
from nsa_policy.lint.extract_shell import ShellState, launches_in_shell
from nsa_policy.lint.extract_structured import launch_start_texts
from nsa_policy.lint.report import EnvValue, FileScan, Launch
from nsa_policy.lint.shell import Expander, split_commands, vllm_launch_start
from nsa_policy.lint.text import LineIndex
from nsa_policy.lint.tree import ParseError, json_document

_INSTR = re.compile(r"^[ \t]*([A-Za-z]+)[ \t]*", re.M)


@dataclass
class _Stage:
    exp: Expander = field(default_factory=Expander)
    env: dict[str, EnvValue] = field(default_factory=dict)
    entrypoint: Optional[tuple] = None  # ("exec", tokens) | ("shell", chunk, base)
    cmd: Optional[tuple] = None


def _instructions(text: str):
    """(keyword, argument chunk, absolute offset of the chunk) for each instruction."""
    i, n = 0, len(text)
    while i < n:
        eol = text.find("\n", i)
        eol = n if eol == -1 else eol
        line = text[i:eol]
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            i = eol + 1
            continue
        m = _INSTR.match(text, i)
        end = eol
        while end > i and text[i:end].rstrip("\r").endswith("\\") and end < n:  # continuation lines
            nxt = text.find("\n", end + 1)
            end = n if nxt == -1 else nxt
        if m and m.end() <= eol:
            yield m.group(1).upper(), text[m.end():end], m.end(), i
        i = end + 1


def scan_dockerfile(path: str, text: str, index: LineIndex) -> FileScan:
    scan = FileScan(path)
    stage = _Stage()

    def finish(st: _Stage) -> None:
        scan.launches.extend(_stage_launches(st, path, index))

    for kw, chunk, base, _line_start in _instructions(text):
        if kw == "FROM":
            finish(stage)
            stage = _Stage()
        elif kw in ("ENV", "ARG"):
            words = [w for cmd in split_commands(chunk, base, stage.exp) for w in cmd]
            if kw == "ENV" and words and "=" not in words[0].text and len(words) > 1:
                words = [type(words[0])(words[0].text + "=" + " ".join(w.text for w in words[1:]),
                                        words[0].start, words[-1].end, words[1].unresolved)]
            for w in words:
                name, eq, value = w.text.partition("=")
                if not eq and kw == "ARG":
                    continue
                stage.exp.vars[name] = value
                if kw == "ENV":
                    stage.env[name] = EnvValue(value, index.loc(path, w.start), w.unresolved)
        elif kw in ("ENTRYPOINT", "CMD"):
            form = _form(chunk, base, path, index)
            if kw == "ENTRYPOINT":
                stage.entrypoint, stage.cmd = form, None  # a new ENTRYPOINT resets CMD
            else:
                stage.cmd = form
    finish(stage)
    return scan


def _form(chunk: str, base: int, path: str, index: LineIndex) -> tuple:
    body = chunk.lstrip()
    if body.startswith("["):
        off = base + (len(chunk) - len(body))
        cleaned = re.sub(r"\\\r?\n", lambda m: " " * len(m.group(0)), body)
        sub_index = LineIndex(cleaned)
        try:
            node = json_document(cleaned.rstrip(), sub_index)
        except ParseError:
            node = None
        if node is not None and node.kind == "seq" and all(isinstance(i.value, str) for i in node.items):
            tokens = []
            for item in node.items:
                loc = index.loc(path, off + sub_index.offset(item.line, item.col))
                tokens.append((item.value, loc, None))
            return ("exec", tokens)
    return ("shell", chunk, base)


def _stage_launches(st: _Stage, path: str, index: LineIndex) -> list[Launch]:
    ep, cmd = st.entrypoint, st.cmd
    if ep is not None and ep[0] == "exec":
        tokens = list(ep[1]) + (list(cmd[1]) if cmd is not None and cmd[0] == "exec" else [])
        return _exec_launch(tokens, st, path)
    if ep is not None:
        return _shell_launch(ep, st, path, index)
    if cmd is not None:
        return _exec_launch(cmd[1], st, path) if cmd[0] == "exec" else _shell_launch(cmd, st, path, index)
    return []


def _exec_launch(tokens: list, st: _Stage, path: str) -> list[Launch]:
    start = launch_start_texts([t[0] for t in tokens])
    vstart = vllm_launch_start([t[0] for t in tokens]) if start is None else None
    if vstart is not None:
        from nsa_policy.engines.vllm.lint import parse_vllm_cli

        return [Launch(path, tokens[0][1], "dockerfile", args=parse_vllm_cli(tokens[vstart:]), env=dict(st.env),
                       engine="vllm")]
    if start is None:
        # ["sh", "-c", "python -m sglang.launch_server …"] has no positions inside the string; say where it starts
        return []
    return [Launch(path, tokens[0][1], "dockerfile", args=parse_cli(tokens[start:]), env=dict(st.env))]


def _shell_launch(form: tuple, st: _Stage, path: str, index: LineIndex) -> list[Launch]:
    state = ShellState(Expander(st.exp.vars), dict(st.env))
    return launches_in_shell(form[1], form[2], index, path, state, "dockerfile")



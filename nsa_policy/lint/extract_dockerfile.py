"""Launches in Dockerfiles: ENTRYPOINT and CMD (exec and shell forms), ENV and ARG per stage."""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Optional

from nsa_policy.lint.extract_shell import ShellState, launches_in_shell, launches_in_string
from nsa_policy.lint.report import EnvValue, FileScan, Launch
from nsa_policy.lint.shell import Expander, Word, command_string, find_launch, launch_from, mentions_launch, split_commands
from nsa_policy.lint.text import FixedIndex, LineIndex
from nsa_policy.lint.tree import ParseError, json_document

_INSTR = re.compile(r"^[ \t]*([A-Za-z]+)[ \t]*", re.M)


@dataclass
class _Stage:
    exp: Expander = field(default_factory=Expander)
    env: dict[str, EnvValue] = field(default_factory=dict)
    entrypoint: Optional[tuple] = None  # ("exec", tokens) | ("shell", chunk, base)
    cmd: Optional[tuple] = None
    name: Optional[str] = None  # FROM … AS name
    # the lines this stage and the stages it builds on span: their image tags and pins name its release
    lines: list[tuple[int, int]] = field(default_factory=list)


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
    """Each stage's launch (its ENTRYPOINT and CMD), with the stage's ENV; the release it targets is read
    only from the image tags and pins of that stage and of the stages it is built FROM (a multi-stage
    build's first stage does not judge the final one)."""
    scan = FileScan(path)
    stage = _Stage()
    stages: dict[str, _Stage] = {}
    begin_line = 1

    def finish(st: _Stage, last_line: int) -> None:
        st.lines.append((begin_line, last_line))
        for la in _stage_launches(st, path, index):
            la.scope = tuple(st.lines)
            scan.launches.append(la)

    for kw, chunk, base, line_start in _instructions(text):
        if kw == "FROM":
            line = index.loc(path, line_start).line
            finish(stage, line - 1)
            words = chunk.split()
            parent = stages.get(words[0].lower()) if words else None
            stage = _Stage()
            if parent is not None:  # FROM builder AS final: the parent's ENV, tags and pins carry over
                stage.exp, stage.env, stage.lines = parent.exp.copy(), dict(parent.env), list(parent.lines)
            if len(words) >= 3 and words[-2].lower() == "as":
                stage.name = words[-1].lower()
                stages[stage.name] = stage
            begin_line = line
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
    finish(stage, index.loc(path, len(text)).line)
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
                at = off + sub_index.offset(item.line, item.col)
                loc = index.loc(path, at)
                plain = index.text[at + 1:at + 1 + len(item.value)] == item.value and "\\" not in item.value
                # the 4th field: the file offset of the string's text when it is the value as written
                tokens.append((item.value, loc, None, at + 1 if plain else None))
            return ("exec", tokens)
    return ("shell", chunk, base)


def _stage_launches(st: _Stage, path: str, index: LineIndex) -> list[Launch]:
    ep, cmd = st.entrypoint, st.cmd
    if ep is not None and ep[0] == "exec":
        tokens = list(ep[1]) + (list(cmd[1]) if cmd is not None and cmd[0] == "exec" else [])
        return _exec_launch(tokens, st, path, index)
    if ep is not None:
        return _shell_launch(ep, st, path, index)
    if cmd is not None:
        return _exec_launch(cmd[1], st, path, index) if cmd[0] == "exec" else _shell_launch(cmd, st, path, index)
    return []


def _exec_launch(tokens: list, st: _Stage, path: str, index: LineIndex) -> list[Launch]:
    texts = [t[0] for t in tokens]
    hit = find_launch(texts)
    if hit is not None:
        engine, start = hit
        return [launch_from(engine, [t[:3] for t in tokens[start:]], path, tokens[0][1], "dockerfile", dict(st.env))]
    j = command_string(texts)  # ["bash", "-c", "python -m sglang.launch_server …"]
    if j is None or not mentions_launch(texts[j]):
        return []
    value, at, exact = tokens[j][0], tokens[j][1], tokens[j][3] if len(tokens[j]) > 3 else None
    word = Word(value, exact if exact is not None else 0, (exact or 0) + len(value), None, True)
    state = ShellState(Expander(st.exp.vars), dict(st.env))
    if exact is not None:  # the JSON string holds no escapes: its text is the file's, placed exactly
        return launches_in_shell(value, exact, index, path, state, "dockerfile")
    return launches_in_string(word, FixedIndex(value, at), path, state, "dockerfile")


def _shell_launch(form: tuple, st: _Stage, path: str, index: LineIndex) -> list[Launch]:
    state = ShellState(Expander(st.exp.vars), dict(st.env))
    return launches_in_shell(form[1], form[2], index, path, state, "dockerfile")



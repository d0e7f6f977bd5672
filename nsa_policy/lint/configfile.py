"""`--config FILE.yaml`: the server arguments a YAML file holds, as vLLM (utils/argparse_utils.py:
load_config_file) and sglang (srt/utils/server_args_config_parser.py) both read it: each key is a long
flag name without `--` (underscores allowed), a mapping's merge keys apply, `true` is a bare switch,
`false`/null add nothing; the file's arguments go before the command line's, so the command line wins."""
from __future__ import annotations

from typing import Any, Callable, Optional

from nsa_policy.base.errors import InputError
from nsa_policy.lint.report import OUTSIDE_FIX, Arg, Location

CONFIG_FLAG = "--config"


def node_value(node: Any) -> Any:
    """A YAML node as plain Python (scalars, lists, mappings)."""
    if node.kind == "scalar":
        return node.value
    if node.kind == "seq":
        return [node_value(i) for i in node.items]
    from nsa_policy.lint.tree import merged_pairs

    return {k.value: node_value(v) for k, v in merged_pairs(node)}


def config_mapping_args(node: Any, path: str) -> list[Arg]:
    """A `vllm serve --config` mapping's keys as the flags vLLM turns them into: `--KEY VALUE` (keys are the
    long flag names without `--`; vLLM's parser also takes underscores), `True` a bare flag, each placed at
    its key. An `attention-config` mapping stays one `--attention-config` argument."""
    from nsa_policy.lint.tree import merged_pairs

    out = []
    for k, v in merged_pairs(node):
        if not isinstance(k.value, str):
            continue
        key = k.value.replace("_", "-")
        value = node_value(v)
        if value is False or value is None:
            continue  # vLLM adds no flag for them
        out.append(Arg(f"--{key}", True if value is True else value, Location(path, k.line, k.col), "key"))
    return out


def read_config_file(arg: Arg, base_dir: str, read: Optional[Callable[[str], str]] = None) -> list[Arg]:
    """The arguments of the YAML file a `--config` names (relative to `base_dir`). Raises InputError
    (one line: the flag, the path, why) when it cannot be read or is not one mapping. `read`: how the
    file is read (lint: only inside the linted tree); default: safe_io.read_text."""
    import os

    from nsa_policy.base.safe_io import read_text
    from nsa_policy.lint.text import LineIndex
    from nsa_policy.lint.tree import ParseError, yaml_documents

    if not isinstance(arg.value, str) or arg.value is True:
        raise InputError(CONFIG_FLAG, arg.value, hint="takes the path of a YAML file")
    full = arg.value if os.path.isabs(arg.value) else os.path.join(base_dir, arg.value)
    try:
        text = read(full) if read is not None else read_text(full, field=CONFIG_FLAG)
    except OSError as exc:
        raise InputError(CONFIG_FLAG, arg.value, hint=f"cannot read it: {exc.strerror or exc}") from None
    try:
        docs = yaml_documents(text, LineIndex(text))
    except ParseError as exc:
        raise InputError(CONFIG_FLAG, arg.value, hint=f"not YAML: {exc}") from None
    if len(docs) != 1 or docs[0].kind != "map":
        raise InputError(CONFIG_FLAG, arg.value, hint="vLLM reads one YAML mapping of flag names to values")
    return config_mapping_args(docs[0], arg.value)


def with_config_files(launch_args: list[Arg], base_dir: str,
                      bad: Optional[Callable[[str, Arg], None]] = None,
                      read: Optional[Callable[[str], str]] = None) -> list[Arg]:
    """The launch's arguments with each `--config FILE` replaced by the file's arguments, placed first:
    vLLM's command-line arguments win over the file's. A file that cannot be read is told to `bad`
    (lint), or raises InputError when there is none (launch)."""
    files: list[Arg] = []
    rest: list[Arg] = []
    for arg in launch_args:
        if arg.spelling != CONFIG_FLAG or arg.unresolved is not None:
            rest.append(arg)
            continue
        try:
            files += read_config_file(arg, base_dir, read)
        except Skipped:
            continue
        except InputError as exc:
            if bad is None:
                raise
            bad(str(exc), arg)
    return files + rest




def read_confined(checker: Any, launch: Any, out: list) -> Callable[[str], str]:
    """How lint reads a `--config` file: only inside the linted tree (checker.reader); a path outside it
    is an NSA409 and is never opened."""
    from nsa_policy.lint.confine import OutsideTree

    def read(full: str) -> str:
        try:
            return checker.reader.read(full, field=CONFIG_FLAG)
        except OutsideTree as exc:
            out.append(checker.diag("NSA409", f"{CONFIG_FLAG} {exc.value!r} is outside the linted tree: lint never "
                                              f"reads it; the arguments it holds were not checked", launch.loc,
                                    fix=OUTSIDE_FIX))
            raise Skipped() from None

    return read


class Skipped(InputError):
    """A --config outside the linted tree: already reported (NSA409), nothing to read."""

    def __init__(self) -> None:
        super().__init__(CONFIG_FLAG, None, hint="outside the linted tree")

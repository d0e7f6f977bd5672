"""Reading and writing files the tool does not trust: every reader and writer goes through here.

lint reads files from pull requests, `--model` and `--cases` take any path, and rule bundles may
come from a site folder, so the same limits apply everywhere:

- only regular files are read (a FIFO, a device or a socket would block or never end), checked on
  the open descriptor, which is opened non-blocking so that even a FIFO swapped in cannot hang us;
- at most `MAX_FILE_BYTES` are read, and a larger file is refused rather than truncated;
- text is UTF-8, and a bad byte is reported at file:line;
- structured documents (YAML, JSON, TOML) may nest at most `MAX_DEPTH` levels, and a YAML
  document may expand to at most `MAX_YAML_NODES` nodes once its aliases are followed (an alias
  bomb of 560 bytes otherwise expands to millions of nodes in whoever walks it);
- writes go to a temporary file in the target folder and are renamed into place, after the
  target was checked before any work started, and never onto a file the command reads.
"""
from __future__ import annotations

import errno
import json
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Union

import yaml

from nsa_policy.base.errors import InputError

PathLike = Union[str, "os.PathLike[str]"]

MAX_FILE_BYTES = 8 * 1024 * 1024  # far above any real config, rule file or case file
MAX_DEPTH = 64  # nesting of mappings/lists; real configs stay under 10
MAX_YAML_NODES = 200_000  # nodes after alias expansion
# int("…") refuses more digits than this (CPython's limit, a ValueError); a literal that long is refused as input
MAX_INT_DIGITS = sys.get_int_max_str_digits() if hasattr(sys, "get_int_max_str_digits") else 4300
_LONG_DIGITS = re.compile(r"\d{" + str(MAX_INT_DIGITS or 4300) + ",}")


class UnsafeInput(InputError):
    """A file the tool refuses to read or write; the message names the file and the limit."""

    def __init__(self, field: str, value: object, hint: str):
        super().__init__(field, value, hint=hint)
        self.hint = hint  # the limit broken, for callers that report it in their own words


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "not a regular file"


def read_bytes(path: PathLike, *, field: str = "file", max_bytes: int = MAX_FILE_BYTES,
               follow_symlinks: bool = True) -> bytes:
    """The bytes of a regular file of at most max_bytes; anything else is an UnsafeInput.
    follow_symlinks=False refuses a symbolic link itself (as git does for .gitignore)."""
    name = os.fspath(path)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0)
    if not follow_symlinks:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise block until a writer appears.
        fd = os.open(name, flags)
    except FileNotFoundError:
        raise UnsafeInput(field, name, "no such file") from None
    except IsADirectoryError:
        raise UnsafeInput(field, name, "is a directory, a file is expected") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP and not follow_symlinks:
            raise UnsafeInput(field, name, "is a symbolic link; it is not followed") from None
        raise UnsafeInput(field, name, f"cannot open: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeInput(field, name, f"is {_kind(st.st_mode)}; only regular files are read")
        if st.st_size > max_bytes:
            raise UnsafeInput(field, name, f"is {st.st_size} bytes; the limit is {max_bytes} bytes")
        chunks, total = [], 0
        while True:
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                break
            total += len(chunk)
            if total > max_bytes:  # grew while we read it
                raise UnsafeInput(field, name, f"is over the limit of {max_bytes} bytes")
            chunks.append(chunk)
        return b"".join(chunks)
    except OSError as exc:
        raise UnsafeInput(field, name, f"cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def decode_utf8(data: bytes, name: str, *, field: str = "file") -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        raise UnsafeInput(field, f"{name}:{line}", f"not UTF-8 (byte 0x{data[exc.start]:02x})") from None


def read_text(path: PathLike, *, field: str = "file", max_bytes: int = MAX_FILE_BYTES,
              follow_symlinks: bool = True) -> str:
    """A regular file's text, UTF-8, within the size limit."""
    data = read_bytes(path, field=field, max_bytes=max_bytes, follow_symlinks=follow_symlinks)
    return decode_utf8(data, os.fspath(path), field=field)


def check_digits(text: str, name: str, *, field: str = "file") -> None:
    """Refuse a number literal longer than int() converts (CPython raises ValueError past 4300 digits),
    at its line, before a parser meets it."""
    m = _LONG_DIGITS.search(text)
    if m is not None:
        line = text.count("\n", 0, m.start()) + 1
        raise UnsafeInput(field, f"{name}:{line}", f"a number of {m.end() - m.start()} digits; "
                                                   f"at most {MAX_INT_DIGITS} are read")


def check_regular_or_dir(path: PathLike, *, field: str, want_dir: bool | None = None) -> str:
    """'file' or 'dir' for a path to be read; a FIFO, device or socket is refused before it is opened."""
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        raise UnsafeInput(field, name, "no such file or directory") from None
    except OSError as exc:
        raise UnsafeInput(field, name, f"cannot read: {exc.strerror or exc}") from None
    if stat.S_ISDIR(st.st_mode):
        if want_dir is False:
            raise UnsafeInput(field, name, "is a directory, a file is expected")
        if not os.access(name, os.R_OK | os.X_OK):
            raise UnsafeInput(field, name, "is a directory that cannot be read")
        return "dir"
    if not stat.S_ISREG(st.st_mode):
        raise UnsafeInput(field, name, f"is {_kind(st.st_mode)}; only regular files are read")
    if want_dir is True:
        raise UnsafeInput(field, name, "is a file, a directory is expected")
    if not os.access(name, os.R_OK):
        raise UnsafeInput(field, name, "cannot be read (permission denied)")
    return "file"


# --- structure limits ---------------------------------------------------------------------------

def check_depth(value: Any, name: str, *, field: str = "file", max_depth: int = MAX_DEPTH) -> Any:
    """The value, if its lists and mappings nest at most max_depth levels (iterative: no recursion)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    seen: set[int] = set()
    while stack:
        node, depth = stack.pop()
        if isinstance(node, (dict, list, tuple)):
            if depth > max_depth:
                raise UnsafeInput(field, name, f"nests deeper than {max_depth} levels")
            if id(node) in seen:  # a YAML alias: its size was bounded when it was composed
                continue
            seen.add(id(node))
            children = node.values() if isinstance(node, dict) else node
            stack.extend((child, depth + 1) for child in children)
            if isinstance(node, dict):
                stack.extend((key, depth + 1) for key in node if isinstance(key, (tuple, list)))
    return value


def check_yaml_text(text: str, name: str, *, field: str = "file", max_nodes: int = MAX_YAML_NODES,
                    max_depth: int = MAX_DEPTH) -> None:
    """Bound a YAML stream before anything composes it: nesting depth, and size once aliases expand.

    Works on the parser's event stream, which is flat: libyaml's composer recurses in C per level
    (deep nesting there is a segfault, not an exception), and a consumer that walks an alias bomb
    expands it. An alias counts the expanded size of its anchor, computed once, so the scan stays
    linear in the text however large the expansion would be.
    """
    anchors: dict[str, int] = {}
    stack: list[list[Any]] = []  # [anchor, size so far] per open collection
    total = 0
    try:
        for event in yaml.parse(text, Loader=_ComposeLoader):
            if isinstance(event, (yaml.SequenceStartEvent, yaml.MappingStartEvent)):
                stack.append([event.anchor, 1])
                if len(stack) > max_depth:
                    raise UnsafeInput(field, name, f"nests deeper than {max_depth} levels")
                continue
            if isinstance(event, (yaml.SequenceEndEvent, yaml.MappingEndEvent)):
                anchor, size = stack.pop()
            elif isinstance(event, yaml.ScalarEvent):
                anchor, size = event.anchor, 1
            elif isinstance(event, yaml.AliasEvent):
                anchor, size = None, anchors.get(event.anchor, 1)
            else:
                continue
            if anchor:
                anchors[anchor] = size
            if stack:
                stack[-1][1] += size
                if stack[-1][1] > max_nodes:
                    raise UnsafeInput(field, name, f"expands to more than {max_nodes} YAML nodes (aliases); refused")
            else:
                total += size
                if total > max_nodes:
                    raise UnsafeInput(field, name, f"expands to more than {max_nodes} YAML nodes (aliases); refused")
    except yaml.YAMLError:
        # Some PyYAML releases (6.0.4) refuse deep flow nesting in the scanner, before any event: the
        # same limit, so the same message, whichever release is installed.
        if flow_depth(text) > max_depth:
            raise UnsafeInput(field, name, f"nests deeper than {max_depth} levels") from None
        return  # not valid YAML: the real loader reports it, with its line
    except RecursionError:
        raise UnsafeInput(field, name, f"nests deeper than {max_depth} levels") from None


def flow_depth(text: str) -> int:
    """The deepest `[`/`{` nesting outside quotes and comments: a linear scan, no YAML parser."""
    depth = deepest = 0
    quote = ""
    comment = False
    prev = "\n"
    for ch in text:
        if comment:
            comment = ch != "\n"
        elif quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and prev in " \t\n":
            comment = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth = max(depth - 1, 0)
        prev = ch
    return deepest


_ComposeLoader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def compose_yaml(text: str, name: str, *, field: str = "file") -> Any:
    """Compose (not construct) a bounded YAML document: the node graph with marks, or None."""
    check_yaml_text(text, name, field=field)
    loader = _ComposeLoader(text)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def load_yaml_text(text: str, name: str, *, field: str = "file") -> Any:
    """yaml.safe_load with the alias, depth and digit limits, for readers that need no line numbers."""
    check_yaml_text(text, name, field=field)  # refuses bombs and deep nesting before construction
    check_digits(text, name, field=field)
    try:
        return yaml.load(text, Loader=_ComposeLoader)  # noqa: S506 - a safe loader (CSafeLoader/SafeLoader)
    except yaml.YAMLError as exc:  # any release's error class, as one input error with its line
        mark = getattr(exc, "problem_mark", None)
        where = f"{name}:{mark.line + 1}" if mark is not None else name
        raise UnsafeInput(field, where, f"not valid YAML: {getattr(exc, 'problem', None) or exc}") from None
    except RecursionError:
        raise UnsafeInput(field, name, f"nests deeper than {MAX_DEPTH} levels") from None
    except ValueError as exc:  # a constructor's own refusal (a timestamp or number it cannot convert)
        raise UnsafeInput(field, name, f"not valid YAML: {exc}") from None


def load_json_text(text: str, name: str, *, field: str = "file") -> Any:
    check_digits(text, name, field=field)
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnsafeInput(field, name, f"nests deeper than {MAX_DEPTH} levels") from None
    except json.JSONDecodeError as exc:
        raise UnsafeInput(field, f"{name}:{exc.lineno}", f"not valid JSON: {exc.msg}") from None
    except ValueError as exc:
        raise UnsafeInput(field, name, f"not valid JSON: {exc}") from None
    return check_depth(value, name, field=field)


def load_toml_text(text: str, name: str, *, field: str = "file") -> Any:
    """tomllib.loads with the depth and digit limits. tomllib.TOMLDecodeError passes through (it names the
    line and column), every other failure is an UnsafeInput."""
    import tomllib

    if _bracket_depth(text) > MAX_DEPTH:  # tomllib recurses per level; refuse before it does
        raise UnsafeInput(field, name, f"nests deeper than {MAX_DEPTH} levels")
    check_digits(text, name, field=field)
    try:
        value = tomllib.loads(text)
    except RecursionError:
        raise UnsafeInput(field, name, f"nests deeper than {MAX_DEPTH} levels") from None
    except tomllib.TOMLDecodeError:
        raise
    except ValueError as exc:
        raise UnsafeInput(field, name, f"not valid TOML: {exc}") from None
    return check_depth(value, name, field=field)


def _bracket_depth(text: str) -> int:
    """An upper bound on the nesting of inline arrays/tables (strings not excluded: only a bound)."""
    level = peak = 0
    for ch in text:
        if ch in "[{":
            level += 1
            peak = max(peak, level)
        elif ch in "]}":
            level = max(level - 1, 0)
    return peak


# --- writing ---------------------------------------------------------------------------------

def _same_file(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return os.path.realpath(a) == os.path.realpath(b)


def check_output_path(path: PathLike, *, field: str, inputs: Iterable[PathLike] = (), want_dir: bool = False) -> Path:
    """Refuse an output path before any work: missing folder, wrong kind, read-only, or an input file."""
    target = Path(os.fspath(path))
    name = os.fspath(target)
    for source in inputs:
        if os.path.exists(name) and _same_file(name, os.fspath(source)):
            raise UnsafeInput(field, name, f"is an input of this command ({os.fspath(source)}); "
                                           "choose another output path")
    if want_dir:
        if target.exists() and not target.is_dir():
            raise UnsafeInput(field, name, "exists and is not a directory")
        parent = target if target.exists() else target.parent
    else:
        if target.exists():
            st = target.stat()
            if stat.S_ISDIR(st.st_mode):
                raise UnsafeInput(field, name, "is a directory; give a file path")
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeInput(field, name, f"is {_kind(st.st_mode)}; output goes to regular files only")
        parent = target.parent
    parent = parent if os.fspath(parent) else Path(".")
    if not parent.is_dir():
        raise UnsafeInput(field, name, f"folder {os.fspath(parent)} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UnsafeInput(field, name, f"folder {os.fspath(parent)} is not writable")
    return target


def write_atomic(path: PathLike, data: Union[str, bytes], *, field: str = "output") -> None:
    """Write via a temporary file in the same folder and rename it into place: never a half-written file."""
    target = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(target))
    payload = data.encode("utf-8") if isinstance(data, str) else data
    try:
        fd, tmp = tempfile.mkstemp(prefix=".nsa-policy-", dir=folder)
    except OSError as exc:
        raise UnsafeInput(field, target, f"cannot write: {exc.strerror or exc}") from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(payload)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except OSError:
            mode = 0o644
        os.chmod(tmp, mode)
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        hint = "disk full" if exc.errno == errno.ENOSPC else f"cannot write: {exc.strerror or exc}"
        raise UnsafeInput(field, target, hint) from None

"""The decision log: one JSON line per decision, enough to answer "why did this server run trtllm on May 3rd".

Each line is a `DecisionLogEntry`: the format tag, the time (UTC), where the decision was made
(origin, host, pid, context) and the whole `Decision` (policy name and digest, inputs, outputs,
provenance, findings and, unless left out, the rule trace). The format is documented in
docs/decision-log.md; `read_decision_log` parses it back into the models.

Lines are appended with one `write` on a file opened O_APPEND, so processes sharing one log
(the ranks of a server) do not interleave within a line.
"""

import json
import logging
import os
import socket
import stat
import threading
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Final, Iterator, Literal, Mapping, Optional, Union

from pydantic import Field, ValidationError

from nsa_policy.base.errors import InputError
from nsa_policy.core.decision import Decision
from nsa_policy.core.facts import Frozen

LOG_FORMAT: Final = "nsa-policy-decision-log/1"


class DecisionLogEntry(Frozen):
    """One line of the decision log."""

    format: Literal["nsa-policy-decision-log/1"] = LOG_FORMAT
    time: str = Field(description="when the decision was logged: ISO 8601, UTC, microseconds")
    origin: str = Field(description="who decided: cli.resolve, startup.apply, launch, or a logger name")
    host: str
    pid: int
    context: dict[str, Any] = Field(default_factory=dict,
                                    description="origin-specific: fields written, env vars set, the command, the rank")
    decision: Decision


def _utc(timestamp: Optional[float] = None) -> str:
    moment = datetime.now(timezone.utc) if timestamp is None else datetime.fromtimestamp(timestamp, timezone.utc)
    return moment.isoformat(timespec="microseconds")


def make_entry(decision: Decision, *, origin: str, context: Optional[Mapping[str, Any]] = None,
               timestamp: Optional[float] = None, include_trace: bool = True) -> DecisionLogEntry:
    if not include_trace:
        decision = decision.model_copy(update={"trace": ()})
    return DecisionLogEntry(time=_utc(timestamp), origin=origin, host=socket.gethostname(), pid=os.getpid(),
                            context=dict(context or {}), decision=decision)


class DecisionLogError(InputError):
    """The decision was made but could not be logged (the CLI prints it, then exits 3)."""


def check_log_path(path: Union[str, os.PathLike[str]]) -> None:
    """Before any work: the log must be a regular file, or a new one in a writable folder."""
    name = os.fspath(path)
    try:
        st = os.stat(name)
    except FileNotFoundError:
        folder = os.path.dirname(os.path.abspath(name))
        if not os.path.isdir(folder):
            raise InputError("--log-decisions", name, hint=f"folder {folder} does not exist") from None
        if not os.access(folder, os.W_OK | os.X_OK):
            raise InputError("--log-decisions", name, hint=f"folder {folder} is not writable") from None
        return
    except OSError as exc:
        raise InputError("--log-decisions", name, hint=exc.strerror or str(exc)) from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError("--log-decisions", name, hint="not a regular file; decisions are appended to files only")
    if not os.access(name, os.W_OK):
        raise InputError("--log-decisions", name, hint="not writable")


def append_entry(path: Union[str, os.PathLike[str]], entry: DecisionLogEntry) -> None:
    """One O_APPEND write per line, so concurrent writers never interleave inside a line."""
    line = (entry.model_dump_json() + "\n").encode()
    name = os.fspath(path)
    try:
        # O_NONBLOCK: a FIFO without a reader fails at once instead of blocking the server's start-up.
        fd = os.open(name, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_NONBLOCK", 0), 0o644)
    except OSError as exc:
        raise DecisionLogError("decision log", name, hint=f"cannot open for appending: {exc.strerror}") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise DecisionLogError("decision log", name, hint="not a regular file; decisions are appended to files only")
        written = os.write(fd, line)
        if written != len(line):
            raise DecisionLogError("decision log", name, hint=f"short write ({written} of {len(line)} bytes)")
    except OSError as exc:
        raise DecisionLogError("decision log", name, hint=f"cannot append: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def append_decision(path: Union[str, os.PathLike[str]], decision: Decision, *, origin: str = "library",
                    context: Optional[Mapping[str, Any]] = None, include_trace: bool = True) -> DecisionLogEntry:
    """Append one line for `decision` to the log at `path` (created if missing); returns the entry."""
    entry = make_entry(decision, origin=origin, context=context, include_trace=include_trace)
    append_entry(path, entry)
    return entry


# Input names earlier releases of nsa-policy logged (sglang's old spelling was the canonical field)
LEGACY_CONFIG_NAMES = {"nsa_prefill_backend": "prefill_backend", "nsa_decode_backend": "decode_backend"}


def _upgrade(line: str) -> str:
    """A line logged under the legacy input names, read under today's (the log format is unchanged)."""
    if not any(f'"{k}"' in line for k in LEGACY_CONFIG_NAMES):
        return line
    try:
        data = json.loads(line)
        config = data["decision"]["inputs"]["config"]
    except (ValueError, KeyError, TypeError):
        return line  # not this shape: validation says what is wrong
    if isinstance(config, dict):
        for old, new in LEGACY_CONFIG_NAMES.items():
            if old in config and new not in config:
                config[new] = config.pop(old)
    return json.dumps(data)


def parse_entry(line: str, where: str = "decision log") -> DecisionLogEntry:
    try:
        return DecisionLogEntry.model_validate_json(_upgrade(line))
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"]) or "line"
        raise InputError(where, loc, hint=f"not a decision-log line ({LOG_FORMAT}): {err['msg']} at {loc}") from None


def iter_decision_log(path: Union[str, os.PathLike[str]]) -> Iterator[DecisionLogEntry]:
    """Entries in file order; a malformed line is an error naming file:line (blank lines are skipped)."""
    from nsa_policy.base.safe_io import read_text

    # Logs grow: a larger cap than configs, still bounded, and still regular files only.
    text = read_text(path, field="decision log", max_bytes=512 * 1024 * 1024)
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            yield parse_entry(line, f"{os.fspath(path)}:{number}")


def read_decision_log(path: Union[str, os.PathLike[str]]) -> list[DecisionLogEntry]:
    return list(iter_decision_log(path))


class DecisionLogHandler(logging.Handler):
    """A logging handler that appends every record carrying a decision to a decision log.

    nsa_policy's start-up hook (`startup.apply`, `nsa-policy launch`) logs one record per decision
    with the Decision in `record.nsa_decision`; records without one are ignored, so the handler can
    sit on the root logger. Attach it to the "nsa_policy" logger:

        logging.getLogger("nsa_policy").addHandler(DecisionLogHandler("/var/log/nsa-decisions.jsonl"))
    """

    def __init__(self, path: Union[str, os.PathLike[str]], *, include_trace: bool = True, level: int = logging.NOTSET):
        super().__init__(level)
        self.path = Path(path)
        self.include_trace = include_trace
        self._write_lock = threading.Lock()

    def emit(self, record: logging.LogRecord) -> None:
        decision = getattr(record, "nsa_decision", None)
        if not isinstance(decision, Decision):
            return
        try:
            context = getattr(record, "nsa_context", None) or {}
            entry = make_entry(decision, origin=record.name, context=context, timestamp=record.created,
                               include_trace=self.include_trace)
            with self._write_lock:
                append_entry(self.path, entry)
        except Exception:  # a logging handler must never take the server down
            self.handleError(record)

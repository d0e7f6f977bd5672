"""Read the examples out of README.md and docs/: which fenced blocks are commands, which are Python,
which are marked not runnable, and how shown output compares with real output.

The conventions (also in docs/contributing.md):
- a ```console block, or any block whose first line starts with `$ `, is a shell session: each `$ `
  line (with `\\` continuations) is a command, the lines up to the next `$ ` its shown output;
- a ```bash / ```sh / ```shell block without prompts is a list of commands whose output is not shown;
- a ```python block is executed; a statement `expr  # literal` (a Python literal after the comment
  mark) asserts that `expr` equals that literal;
- `<!-- not-run: REASON -->` on the line before a block skips it, with the reason;
- in shown output a line `...` (or `…`) stands for any number of lines, and `...`/`…` inside a line
  for any text.
"""
from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHELL_LANGS = {"console", "bash", "sh", "shell"}
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
NOT_RUN = re.compile(r"^\s*<!--\s*not-run:\s*(.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    text: str
    not_run: str | None  # the reason, when marked

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO)}:{self.line}"

    @property
    def kind(self) -> str | None:
        """'session', 'commands', 'python' or None (data, output or a listing: not an example)."""
        first = next((ln for ln in self.text.splitlines() if ln.strip()), "")
        if first.startswith("$ "):
            return "session"
        if self.lang == "console":
            return "session"
        if self.lang in SHELL_LANGS:
            return "commands"
        if self.lang == "python":
            return "python"
        return None


def doc_files() -> list[Path]:
    files = [REPO / "README.md"]
    files += sorted(p for p in (REPO / "docs").rglob("*.md") if p.is_file())
    return files


def blocks(path: Path) -> list[Block]:
    out: list[Block] = []
    lines = path.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, fence, lang = m.group(1), m.group(2), m.group(3).lower()
        start = i
        body: list[str] = []
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(fence):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i].lstrip())
            i += 1
        i += 1  # the closing fence
        prev = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
        nr = NOT_RUN.match(prev)
        out.append(Block(path, start + 1, lang, "\n".join(body), nr.group(1) if nr else None))
    return out


@dataclass
class Step:
    command: str
    shown: list[str] = field(default_factory=list)


def join_continuations(lines: list[str]) -> list[str]:
    out: list[str] = []
    buf = ""
    for ln in lines:
        if ln.rstrip().endswith("\\"):
            buf += ln.rstrip()[:-1].rstrip() + " "
            continue
        out.append((buf + ln.strip()).strip() if buf else ln)
        buf = ""
    if buf:
        out.append(buf.strip())
    return out


def session_steps(text: str) -> list[Step]:
    steps: list[Step] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        ln = lines[i]
        if ln.startswith("$ "):
            cmd = [ln[2:]]
            while cmd[-1].rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                cmd.append(lines[i])
            steps.append(Step(join_continuations(cmd)[0]))
        elif steps:
            steps[-1].shown.append(ln)
        i += 1
    return steps


def command_lines(text: str) -> list[str]:
    """The commands of a prompt-less shell block: comments and blank lines dropped."""
    out = []
    for ln in join_continuations(text.splitlines()):
        s = strip_comment(ln).strip()
        if s:
            out.append(s)
    return out


def strip_comment(line: str) -> str:
    """Drop a trailing `# comment` outside quotes."""
    quote = None
    for k, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (k == 0 or line[k - 1].isspace()):
            return line[:k]
    return line


# what differs between a run and the page without being a difference: digests, times, paths, padding
_HEX = re.compile(r"\b[0-9a-f]{12,64}\b")
_TIME = re.compile(r"\b\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d)?\b|\b\d+(?:\.\d+)? ?(?:ms|µs|s)\b")


def normalise(line: str, tmp: str | None = None) -> str:
    if tmp:
        line = line.replace(tmp + "/", "").replace(tmp, ".")
    line = line.replace(str(REPO) + "/", "").replace(str(REPO), ".")
    line = _HEX.sub("<digest>", line)
    line = _TIME.sub("<time>", line)
    return " ".join(line.split())


def _is_ellipsis(line: str) -> bool:
    return line.strip() in ("...", "…")


def _line_pattern(shown: str) -> re.Pattern[str]:
    parts = re.split(r"\.\.\.|…", shown)
    return re.compile("^" + ".*".join(re.escape(p) for p in parts) + "$")


def output_matches(shown: list[str], real: list[str]) -> bool:
    """Does the real output fit the shown one? `...` lines match any run of lines (blank real lines
    are ignored throughout: a page's paragraphs are not the program's)."""
    want = [ln for ln in shown if ln.strip()]
    have = [ln for ln in real if ln.strip()]
    memo: dict[tuple[int, int], bool] = {}

    def match(i: int, j: int) -> bool:
        key = (i, j)
        if key in memo:
            return memo[key]
        if i == len(want):
            ok = j == len(have)
        elif _is_ellipsis(want[i]):
            ok = any(match(i + 1, k) for k in range(j, len(have) + 1))
        else:
            ok = j < len(have) and bool(_line_pattern(want[i]).match(have[j]))
            ok = ok and match(i + 1, j + 1)
        memo[key] = ok
        return ok

    return match(0, 0)


def literal_checks(source: str) -> list[tuple[int, str, object]]:
    """(line, expression source, expected value) for each `expr  # literal` statement."""
    tree = ast.parse(source)
    lines = source.splitlines()
    out = []
    for node in tree.body:
        if not isinstance(node, ast.Expr) or node.end_lineno != node.lineno:
            continue
        line = lines[node.lineno - 1]
        rest = line[node.end_col_offset:].strip()
        if not rest.startswith("#"):
            continue
        comment = rest[1:].strip()
        # the literal may be followed by a remark in parentheses: `# ['NSA250']  (fp8 stored as ...)`
        for cut in [len(comment)] + [m.start() for m in re.finditer(r"\s{2,}|\s\(", comment)]:
            try:
                value = ast.literal_eval(comment[:cut].strip())
            except (ValueError, SyntaxError):
                continue
            out.append((node.lineno, ast.get_source_segment(source, node) or "", value))
            break
    return out


DOTTED = re.compile(r"(?<![\w./-])nsa_policy(?:\.[A-Za-z_]\w*)+")


def dotted_names(text: str) -> set[str]:
    return {m.group(0) for m in DOTTED.finditer(text)}

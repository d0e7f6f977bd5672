"""sglang's server arguments, release by release: the one registry (rules/catalog/sglang/args.yaml).

Every surface that spells an sglang argument derives its table from here: resolve's flags, the
library's input aliases (inputs.FIELD_ALIASES), launch's flag table, lint's flag registry,
start-up's targets and parser destinations, and the documentation table. Releases are compared
as PEP 440 versions (0.5.12.post1 < 0.5.13rc1 < 0.5.13); a local label (+cu129) does not count.
"""

from functools import lru_cache
from typing import Annotated, Any, Literal, Optional, TypeVar

from packaging.version import Version
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from nsa_policy.base.errors import InputError
from nsa_policy.base.paths import catalog_dir
from nsa_policy.base.schema_load import load_doc
from nsa_policy.base.versions import parse_version

T = TypeVar("T")


def _as_tuple(value: Any) -> Any:
    return tuple(value) if isinstance(value, list) else value


# YAML gives lists; the models are strict and hold tuples (immutable, hashable).
Tup = Annotated[tuple[T, ...], BeforeValidator(_as_tuple)]

SpellingStatus = Literal["canonical", "deprecated", "removed", "not-yet", "nsa-policy"]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", defer_build=True)


class _Ranged(_Spec):
    """A release range: from `first` to `last` (absent: still in the newest release)."""

    first: Optional[str] = None
    last: Optional[str] = None
    nsa_policy_only: bool = Field(default=False, description="accepted by nsa-policy's own surfaces only")

    @model_validator(mode="after")
    def _range(self) -> "_Ranged":
        if self.nsa_policy_only == (self.first is not None):
            raise ValueError("give either first (an sglang release) or nsa_policy_only: true")
        for value in (self.first, self.last):
            if value is not None:
                parse_version(value, field="release")
        return self

    def covers(self, release: Version) -> bool:
        if self.first is None:
            return False
        if release < _v(self.first):
            return False
        return self.last is None or release <= _v(self.last)


class Spelling(_Ranged):
    flag: str = Field(pattern=r"^--[a-z0-9][a-z0-9-]*$")
    deprecated: Optional[str] = Field(
        default=None, description="from this release the parser warns and stores into the canonical dest")
    dest: Optional[str] = Field(default=None, description="this spelling's own argparse dest, when not the argument's")
    switch: Optional[str] = Field(
        default=None, description="with `dest`: the switch attribute without which that dest's value does not count")
    choices: Optional[Tup[str]] = Field(
        default=None, description="this spelling's own choices, when narrower than the argument's")
    use: Optional[str] = Field(
        default=None, description="what the release's deprecation warning says to use instead, when not the "
                                  "argument's canonical flag (--enable-dp-attention: '--attn-dp-size <dp-size>')")
    implies: Optional[dict[str, str]] = Field(
        default=None, description="arguments this switch sets when the command leaves them unset, as the release's "
                                  "parser default does (--enable-nsa-prefill-context-parallel: its mode's default "
                                  "round-robin-split, cp_strategy interleave)")

    def status(self, release: Version) -> SpellingStatus:
        if self.nsa_policy_only:
            return "nsa-policy"
        assert self.first is not None
        if release < _v(self.first):
            return "not-yet"
        if self.last is not None and release > _v(self.last):
            return "removed"
        if self.deprecated is not None and release >= _v(self.deprecated):
            return "deprecated"
        return "canonical"


class Attribute(_Ranged):
    name: str = Field(pattern=r"^[a-z][a-z0-9_]*$")
    switch: Optional[str] = Field(
        default=None, description="an attribute that must be true for this one to count: a legacy CP mode "
                                  "(its parser default is always there) is read only with its own switch on")


class Ignored(_Spec):
    first: str
    last: str
    why: str


class EnvVar(_Spec):
    name: str = Field(pattern=r"^[A-Z][A-Z0-9_]*$")
    first: str
    last: Optional[str] = None
    ignored: Optional[Ignored] = Field(default=None, description="releases that declare the name but never honour it")
    default: Optional[int] = Field(default=None, description="the value the release reads when the variable is unset "
                                                            "(environ.py EnvInt(N)); None where not established")

    def read_by(self, release: Version) -> bool:
        return release >= _v(self.first) and (self.last is None or release <= _v(self.last))

    def ignored_by(self, release: Version) -> bool:
        return self.ignored is not None and _v(self.ignored.first) <= release <= _v(self.ignored.last)


class Choices(_Spec):
    first: str
    last: Optional[str] = None
    values: Tup[str]


class ChoicesFrom(_Spec):
    """Choices owned by another catalog: the backends sglang lists for a phase's flag (backends.yaml)."""

    catalog: Literal["backends"]
    phase: Literal["prefill", "decode"]


class ChoiceAlias(_Spec):
    value: str
    canonical: str
    deprecated: str
    distinct_before: bool = Field(default=False, description=(
        "before `deprecated` the value was a choice of its own, with its own checks: the policy reads it as "
        "given, and renames it (with `implies`) only for a release at or after `deprecated`"))
    implies: dict[str, Any] = Field(default_factory=dict, description=(
        "what the release's own rename also sets (field -> value), as sglang declares it before any resolution"))


class Argument(_Spec):
    name: str = Field(description="the canonical name in the newest release")
    field: Optional[str] = Field(description="the ServingConfig field the policy reads it as (None: not read directly)")
    output: Optional[str] = Field(default=None, description="the Decision output written into it")
    type: Literal["str", "int", "bool"]
    help: str
    unset_values: Tup[str] = Field(default=(), description="values besides None that mean 'engine decides'")
    spellings: Tup[Spelling]
    attributes: Tup[Attribute] = ()
    parser_dests: Tup[Attribute] = Field(default=(), description="where argparse stores it, when not the attribute")
    env: Tup[EnvVar] = ()
    choices: Tup[Choices] = ()
    choices_from: Optional[ChoicesFrom] = None
    choice_aliases: Tup[ChoiceAlias] = ()


class ArgsDoc(_Spec):
    releases: Tup[str]
    arguments: Tup[Argument]


class TargetRelease(_Spec):
    """The sglang release a command or process targets, and how that was found."""

    version: str
    source: str = Field(description="how it was found: '--sglang-version', 'importlib.metadata of …', 'unknown: …'")
    known: bool = Field(description="one of the registry's releases (else queries use the nearest known spellings)")
    note: Optional[str] = None

    def describe(self) -> str:
        return f"sglang {self.version} ({self.source})"


def _v(text: str) -> Version:
    return Version(parse_version(text, field="release").public)


class ArgRegistry:
    """The loaded registry and its queries. `release` arguments are version strings or Versions."""

    def __init__(self, doc: ArgsDoc):
        self.doc = doc
        self.releases: tuple[str, ...] = doc.releases
        self.arguments: dict[str, Argument] = {a.name: a for a in doc.arguments}
        self.by_flag: dict[str, tuple[Argument, Spelling]] = {}
        self.by_field: dict[str, Argument] = {}
        for arg in doc.arguments:
            if arg.field is not None:
                self.by_field[arg.field] = arg
            for sp in arg.spellings:
                if sp.flag in self.by_flag:
                    raise ValueError(f"{sp.flag} is declared twice")
                self.by_flag[sp.flag] = (arg, sp)

    # releases -------------------------------------------------------------------------------
    @property
    def newest(self) -> str:
        return self.releases[-1]

    @property
    def oldest(self) -> str:
        return self.releases[0]

    def target(self, version: Optional[str], source: str) -> TargetRelease:
        """The release to target: `version` as found by `source`, or the newest known one (with a note) when unknown."""
        if version is None:
            return TargetRelease(version=self.newest, source=f"unknown: {source}; assuming the newest known release",
                                 known=True, note=f"sglang release not found ({source}); targeting {self.newest}, "
                                                  f"the newest release nsa-policy knows; pass --sglang-version to choose")
        v = _v(version)
        if version in self.releases or str(v) in self.releases:
            return TargetRelease(version=str(v), source=source, known=True)
        if v > _v(self.newest):
            note = f"sglang {version} is newer than the newest release nsa-policy knows ({self.newest}): spelled as {self.newest}"
        elif v < _v(self.oldest):
            note = f"sglang {version} is older than the oldest release nsa-policy knows ({self.oldest}): spelled as {self.oldest}"
        else:
            note = f"sglang {version} is not a release nsa-policy knows; spelled by the release ranges around it"
        return TargetRelease(version=str(v), source=source, known=False, note=note)

    def _rel(self, release: object) -> Version:
        """A release as a Version; outside the known span it is clamped to the nearest known release."""
        v = release if isinstance(release, Version) else _v(str(release))
        newest, oldest = _v(self.newest), _v(self.oldest)
        return newest if v > newest else (oldest if v < oldest else v)

    # arguments and spellings ------------------------------------------------------------------
    def argument(self, name: str) -> Argument:
        try:
            return self.arguments[name]
        except KeyError:
            raise InputError("argument", name, sorted(self.arguments)) from None

    def lookup(self, flag: str) -> Optional[tuple[Argument, Spelling]]:
        """The argument and spelling of a flag (with or without its dashes or '=value')."""
        name = flag.split("=", 1)[0]
        if not name.startswith("--"):
            name = "--" + name.lstrip("-").replace("_", "-")
        return self.by_flag.get(name)

    def status(self, flag: str, release: object) -> Optional[SpellingStatus]:
        """canonical / deprecated / removed / not-yet / nsa-policy, or None for a flag the registry does not hold."""
        hit = self.lookup(flag)
        return None if hit is None else hit[1].status(self._rel(release))

    def accepts(self, flag: str, release: object) -> bool:
        """Does that release's parser accept the flag (canonical or deprecated alias)?"""
        return self.status(flag, release) in ("canonical", "deprecated")

    def spelling_for(self, arg: str, release: object) -> Optional[str]:
        """The canonical flag of an argument in a release (None: the release has no such argument)."""
        r = self._rel(release)
        for sp in self.argument(arg).spellings:
            if sp.status(r) == "canonical":
                return sp.flag
        return None

    def refused_text(self, spellings: tuple[str, ...], release: object) -> Optional[str]:
        """The spellings of `spellings` (flags as given) that the release's parser refuses, each with what to
        use instead, as one line; None when it accepts them all. nsa-policy's own spellings are not sglang's."""
        r = self._rel(release)
        parts = []
        for flag in spellings:
            if not flag.startswith("--"):  # an attribute name, as a mapping spells it
                found = self.attribute(flag)
                if found is not None and not found[1].covers(r):
                    a_arg, attr = found
                    first = _v(attr.first) if attr.first else None
                    why = (f"first held in sglang {attr.first}" if first is not None and r < first
                           else f"removed after sglang {attr.last}")
                    now = self.attribute_for(a_arg.name, r)
                    parts.append(f"{flag} (attribute, {why}; " + (f"use {now})" if now else f"sglang {r} has no such attribute)"))
                continue
            hit = self.lookup(flag)
            if hit is None:
                continue
            arg, sp = hit
            status = sp.status(r)
            if status not in ("removed", "not-yet"):
                continue
            why = f"removed after sglang {sp.last}" if status == "removed" else f"first accepted in sglang {sp.first}"
            new = self.spelling_for(arg.name, r)
            var = self.env_var_read(arg.name, r)
            instead = f"use {new}" if new else (f"sglang reads {var} instead" if var else
                                                f"sglang {r} has no such argument")
            parts.append(f"{sp.flag} ({why}; {instead})")
        return ", ".join(parts) or None

    def deprecated_text(self, spellings: tuple[str, ...], release: object) -> Optional[str]:
        """The release parser's own deprecation warnings for the deprecated aliases among `spellings`
        (arg_groups/argparse_actions.py Deprecated*Action), joined; None when there are none."""
        r = self._rel(release)
        out = []
        for flag in spellings:
            hit = self.lookup(flag)
            if hit is None or hit[1].status(r) != "deprecated":
                continue
            arg, sp = hit
            new = sp.use or self.spelling_for(arg.name, r)
            instead = f" Use '{new}' instead." if new else ""
            out.append(f"'{sp.flag}' is deprecated and will be removed in a future release.{instead}")
        return " ".join(out) or None

    def attribute(self, name: str) -> Optional[tuple[Argument, Attribute]]:
        """The argument and attribute entry of an sglang attribute name (any release), else None."""
        for arg in self.doc.arguments:
            for attr in arg.attributes:
                if attr.name == name and not attr.nsa_policy_only:
                    return arg, attr
        return None

    def attribute_for(self, arg: str, release: object) -> Optional[str]:
        """The attribute the release's parsed namespace / ServerArgs holds the argument in."""
        r = self._rel(release)
        return next((a.name for a in self.argument(arg).attributes if a.covers(r)), None)

    def parser_dest_for(self, arg: str, release: object) -> Optional[str]:
        """Where the release's argparse stores the argument (its own dest, else the attribute)."""
        r = self._rel(release)
        dest = next((a.name for a in self.argument(arg).parser_dests if a.covers(r)), None)
        return dest or self.attribute_for(arg, r)

    def env_var_read(self, arg: str, release: object) -> Optional[str]:
        """The environment variable the release actually reads for the argument."""
        r = self._rel(release)
        return next((e.name for e in self.argument(arg).env if e.read_by(r)), None)

    def env_default(self, arg: str, release: object) -> Optional[int]:
        """The release default of the variable the release reads for the argument (None: not established)."""
        r = self._rel(release)
        return next((e.default for e in self.argument(arg).env if e.read_by(r)), None)

    def env_vars_ignored(self, arg: str, release: object) -> dict[str, str]:
        """Variables of the argument the release does not read → why (declared-but-ignored, or not read at all)."""
        r = self._rel(release)
        out: dict[str, str] = {}
        for e in self.argument(arg).env:
            if e.read_by(r):
                continue
            if e.ignored_by(r):
                assert e.ignored is not None
                out[e.name] = e.ignored.why
            elif r < _v(e.first):
                out[e.name] = f"first read in sglang {e.first}"
            else:
                out[e.name] = f"last read in sglang {e.last}"
        return out

    def listed(self, flag: str, release: object) -> Optional[tuple[str, ...]]:
        """The values the release's parser lists for this spelling: its own list where it has one
        (--prefill-cp-mode: in-seq-split only), else its argument's; None where it lists none."""
        hit = self.lookup(flag)
        if hit is None:
            return None
        return hit[1].choices if hit[1].choices is not None else self.choices(hit[0].name, release)

    def choices(self, arg: str, release: object) -> Optional[tuple[str, ...]]:
        """The values the release's parser lists for the argument (None: free-form)."""
        r = self._rel(release)
        a = self.argument(arg)
        if a.choices_from is not None:  # the backend catalog owns which release lists which backend
            from nsa_policy.catalog.store import load_catalog

            return tuple(load_catalog().sglang_choices(str(r), a.choices_from.phase))
        hit = None
        for c in a.choices:
            if _v(c.first) <= r and (c.last is None or r <= _v(c.last)):
                hit = c.values
        return hit

    # derived tables --------------------------------------------------------------------------
    def field_aliases(self) -> dict[str, str]:
        """Every other name of a ServingConfig field: attributes and parser dests of all releases, nsa-policy's own."""
        out: dict[str, str] = {}
        for arg in self.doc.arguments:
            if arg.field is None:
                continue
            names = [a.name for a in arg.attributes] + [a.name for a in arg.parser_dests]
            names += [sp.dest for sp in arg.spellings if sp.dest and sp.switch]  # a legacy mode's own dest
            names += [sp.flag[2:].replace("-", "_") for sp in arg.spellings if sp.nsa_policy_only]
            for name in names:
                if name != arg.field:
                    out.setdefault(name, arg.field)
        return out

    def output_targets(self) -> dict[str, tuple[str, ...]]:
        """Decision output → every attribute that carries it (sglang's, oldest release first, then nsa-policy's)."""
        out: dict[str, tuple[str, ...]] = {}
        for arg in self.doc.arguments:
            if arg.output is None:
                continue
            ranged = [a.name for a in arg.attributes if not a.nsa_policy_only]
            own = [a.name for a in arg.attributes if a.nsa_policy_only]
            out[arg.output] = tuple(dict.fromkeys(ranged + own))
        return out

    def alias_switches(self) -> dict[str, str]:
        """attribute or parser dest → the switch attribute without which its value does not count."""
        out = {a.name: a.switch for arg in self.doc.arguments for a in (*arg.attributes, *arg.parser_dests)
               if a.switch}
        out.update({sp.dest: sp.switch for arg in self.doc.arguments for sp in arg.spellings if sp.dest and sp.switch})
        return out

    def parser_dests(self) -> dict[str, str]:
        """argparse dest → ServingConfig field, for the dests that are not the attribute's name."""
        return {d.name: arg.field for arg in self.doc.arguments if arg.field for d in arg.parser_dests}

    def unset_values(self) -> dict[str, tuple[object, ...]]:
        """Decision output → the values that mean 'unset' (None, plus the argument's 'engine decides' values)."""
        return {arg.output: (None, *arg.unset_values) for arg in self.doc.arguments if arg.output and arg.unset_values}

    def implied(self, flags: Any, given: Any) -> dict[str, Any]:
        """argument → value the given switches imply where `given` (argument names) leaves it unset."""
        out: dict[str, Any] = {}
        for flag in flags:
            hit = self.by_flag.get(flag)
            if hit is None or not hit[1].implies:
                continue
            for arg, value in hit[1].implies.items():
                if arg not in given and arg not in out:
                    out[arg] = value
        return out

    def cli_flags(self, arg: str) -> tuple[str, ...]:
        """Every flag nsa-policy's own CLI accepts for an argument: sglang's spellings of any release, then its own."""
        a = self.argument(arg)
        return tuple(sp.flag for sp in a.spellings if not sp.nsa_policy_only) + \
            tuple(sp.flag for sp in a.spellings if sp.nsa_policy_only)

    def spelling_table(self) -> list[dict[str, str]]:
        """Per argument and release span: the canonical flag, accepted aliases and removed spellings (for docs)."""
        rows: list[dict[str, str]] = []
        spans = self._spans()
        for arg in self.doc.arguments:
            prev: Optional[tuple[str, ...]] = None
            for first, last in spans:
                r = _v(first)
                canonical = self.spelling_for(arg.name, r) or "—"
                deprecated = ", ".join(sp.flag for sp in arg.spellings if sp.status(r) == "deprecated")
                removed = ", ".join(sp.flag for sp in arg.spellings if sp.status(r) == "removed")
                env = self.env_var_read(arg.name, r) or ""
                ignored = ", ".join(self.env_vars_ignored(arg.name, r)) if arg.env else ""
                key = (canonical, deprecated, removed, env, ignored)
                if key == prev:
                    rows[-1]["releases"] = rows[-1]["releases"].split("–")[0] + "–" + last
                    continue
                prev = key
                rows.append({"argument": arg.name, "releases": first if first == last else f"{first}–{last}",
                             "canonical": canonical, "deprecated": deprecated, "removed": removed,
                             "env": env, "env_ignored": ignored})
        return rows

    def release_cells(self, arg: str, release: object) -> str:
        """How a release spells one argument, for a table cell: canonical flag, accepted aliases, refused spellings, variables."""
        r = self._rel(release)
        a = self.argument(arg)
        parts = []
        canonical = [sp.flag for sp in a.spellings if sp.status(r) == "canonical"]
        if canonical:
            parts.append(" or ".join(f"`{f}`" for f in canonical))
        attr, dest = self.attribute_for(arg, r), self.parser_dest_for(arg, r)
        if dest and dest != attr:
            parts[-1] += f" (parser dest `{dest}`)"
        deprecated = [sp.flag for sp in a.spellings if sp.status(r) == "deprecated"]
        if deprecated:
            parts.append("deprecated alias " + ", ".join(f"`{f}`" for f in deprecated))
        removed = [sp.flag for sp in a.spellings if sp.status(r) == "removed"]
        if removed:
            parts.append("refused " + ", ".join(f"`{f}`" for f in removed))
        read = self.env_var_read(arg, r)
        if read:
            parts.append(f"reads `{read}`")
        ignored = [name for name, _ in self.env_vars_ignored(arg, r).items()
                   if any(e.name == name and e.ignored_by(r) for e in a.env)]
        if ignored:
            parts.append("ignores " + ", ".join(f"`{v}`" for v in ignored))
        return "; ".join(parts) or "—"

    def release_table_markdown(self, args: tuple[str, ...] = ("dsa_prefill_backend", "dense_attn_kv_len_threshold",
                                                              "enable_dp_attention", "attn_dp_size", "tp_size",
                                                              "enable_prefill_cp", "cp_strategy")) -> str:
        """Release → spellings: one row per span of releases that spell these arguments alike."""
        head = ["sglang"] + [f"`{self.argument(a).name}`" for a in args]
        rows: list[list[str]] = []
        prev: Optional[list[str]] = None
        for first, last in self._spans():
            cells = [self.release_cells(a, first) for a in args]
            if cells == prev:
                rows[-1][0] = rows[-1][0].split("–")[0] + "–" + last
                continue
            prev = cells
            rows.append([first if first == last else f"{first}–{last}"] + cells)
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines) + "\n"

    def registry_markdown(self) -> str:
        """Every argument of the registry: spellings per release span, variables and choices."""
        out = ["# sglang server arguments nsa-policy reads or writes", "",
               "Generated from `rules/catalog/sglang/args.yaml` by `python scripts/gen_docs.py`; do not edit.",
               "A deprecated alias is accepted with a warning; a refused spelling makes sglang's parser exit",
               "(\"unrecognized arguments\"). Spellings marked *nsa-policy* are accepted only by nsa-policy's own",
               "commands and library calls.", ""]
        for arg in self.doc.arguments:
            out.append(f"## `{arg.name}`")
            out.append("")
            field = f"policy field `{arg.field}`" if arg.field else "not read by the policy directly"
            output = f"; written from decision output `{arg.output}`" if arg.output else ""
            out.append(f"{arg.help} ({arg.type}; {field}{output})")
            out.append("")
            own = [sp.flag for sp in arg.spellings if sp.nsa_policy_only]
            if own:
                out.append("*nsa-policy* spellings: " + ", ".join(f"`{f}`" for f in own))
                out.append("")
            out.append("| sglang | spelling | attribute |")
            out.append("|---|---|---|")
            prev: Optional[tuple[str, str]] = None
            rows: list[list[str]] = []
            for first, last in self._spans():
                cell = self.release_cells(arg.name, first)
                attr = self.attribute_for(arg.name, first)
                attr_cell = f"`{attr}`" if attr else "—"  # a different parser dest is shown in the spelling cell
                key = (cell, attr_cell)
                if key == prev:
                    rows[-1][0] = rows[-1][0].split("–")[0] + "–" + last
                    continue
                prev = key
                rows.append([first if first == last else f"{first}–{last}", cell, attr_cell])
            out += ["| " + " | ".join(r) + " |" for r in rows]
            if arg.choices or arg.choices_from:
                out.append("")
                out.append("Choices" + (" (from rules/catalog/backends.yaml):" if arg.choices_from else ":"))
                out.append("")
                for span, values in self._choice_spans(arg.name):
                    out.append(f"- {span}: " + ", ".join(f"`{v}`" for v in values))
            for e in arg.env:
                if e.ignored is not None:
                    out.append("")
                    out.append(f"`{e.name}` is ignored by {e.ignored.first}–{e.ignored.last}: {e.ignored.why}.")
            out.append("")
        return "\n".join(out)

    def _choice_spans(self, arg: str) -> list[tuple[str, tuple[str, ...]]]:
        """(release span, choices) where the choices change."""
        out: list[tuple[str, tuple[str, ...]]] = []
        for first, last in self._spans():
            values = self.choices(arg, first)
            if values is None:
                continue
            if out and out[-1][1] == values:
                out[-1] = (out[-1][0].split("–")[0] + "–" + last, values)
            else:
                out.append((first if first == last else f"{first}–{last}", values))
        return out

    def _spans(self) -> list[tuple[str, str]]:
        """The known releases as (first, last) spans, one per release (post releases folded into their base)."""
        spans: list[tuple[str, str]] = []
        for rel in self.releases:
            if ".post" in rel and spans:
                spans[-1] = (spans[-1][0], rel)
            else:
                spans.append((rel, rel))
        return spans


@lru_cache(maxsize=1)
def load_args() -> ArgRegistry:
    doc, _ = load_doc(ArgsDoc, catalog_dir() / "sglang" / "args.yaml")
    return ArgRegistry(doc)


# Short module-level queries (the registry's methods, on the shipped registry).
def spelling_for(arg: str, release: object) -> Optional[str]:
    return load_args().spelling_for(arg, release)


def accepts(flag: str, release: object) -> bool:
    return load_args().accepts(flag, release)


def env_var_read(arg: str, release: object) -> Optional[str]:
    return load_args().env_var_read(arg, release)


def choices(arg: str, release: object) -> Optional[tuple[str, ...]]:
    return load_args().choices(arg, release)

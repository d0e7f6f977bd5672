"""The interface every serving engine implements: what the engine-neutral core and the commands ask.

One `Engine` instance per engine owns everything about it: its release bundles' naming, reading its
config objects and spellings, its namespace facts (the fact family named after it, `vllm.valid`,
`sglang.0.5.23.lists_prefill_backend`), the user values it seeds, and its check, lint, launch and
matrix views. The defaults here serve a plain engine (a planted third engine overrides little); the
built-ins override what their engine does differently.
"""
from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Mapping, Optional, Sequence

if TYPE_CHECKING:  # pragma: no cover
    from nsa_policy.catalog.store import Catalog
    from nsa_policy.core.decision import Decision
    from nsa_policy.core.facts import Facts, ServingConfig

_VERSION = r"(\d+(?:\.\d+)+(?:(?:a|b|rc)\d+)?(?:\.post\d+)?)"



class Engine:
    name: str = ""
    title: str = ""  # as prose writes it: "sglang", "vLLM"
    # `default` names the project's recommendation; for this engine that is this bundle.
    default_bundle: str = "default"
    # Release bundles are named <name>-<version>. `minor_releases`: a bundle names X.Y and answers X.Y.*.
    minor_releases: bool = False
    # said after the oldest release bundle's name when a release is older than every bundle
    oldest_note: str = ""
    # Further folders of bundles this engine ships beside rules/policy (an out-of-tree engine's own).
    policy_roots: tuple[Path, ...] = ()
    # Outputs only this engine's decisions hold (another engine's decision leaves them out).
    own_outputs: frozenset[str] = frozenset()
    # resolve's flags for config fields this engine spells differently (field → flag)
    resolve_flags: Mapping[str, str] = {}
    # Whether its releases judge how a flag is spelt (resolve then passes flags as given, not fields).
    judges_spellings: bool = False
    # The engine's argument registry: its flag (without dashes) or attribute → the ServingConfig field.
    arguments: Mapping[str, str] = {}
    # input fields at fault (Finding.fields) → the space dimension that varies them (check's coverage)
    field_dims: Mapping[str, str] = {}
    # Outputs this engine's decisions never set, so an accepted decision without them is not undecided.
    optional_outputs: frozenset[str] = frozenset()

    # ------------------------------------------------------------------ bundles
    def release_of_bundle_name(self, name: str) -> Optional[str]:
        """The release a bundle name names (sglang-0.5.23 → 0.5.23), None when it is not this engine's."""
        m = re.match(rf"^{re.escape(self.name)}-{_VERSION}$", name.strip())
        return m.group(1) if m else None

    def release_bundle(self, name: str) -> Optional[str]:
        """The shipped bundle answering for the release `name` names: the newest at or below it."""
        from nsa_policy.base.errors import InputError
        from nsa_policy.base.versions import parse_version
        from nsa_policy.core.bundle import list_bundles

        release = self.release_of_bundle_name(name)
        if release is None:
            return None
        want = parse_version(release, field="policy")
        shipped = []
        for b in list_bundles():
            r = self.release_of_bundle_name(b)
            if r is not None:
                shipped.append((parse_version(r), b))
        below = [(v, b) for v, b in shipped
                 if v <= want or (self.minor_releases and v.release[:2] == want.release[:2])]
        if not below:
            if self.minor_releases:
                return None
            oldest = min(shipped)[1] if shipped else None
            raise InputError("policy", name, list_bundles(),
                             hint=f"no compatibility bundle reproduces {self.title} {want} or older"
                                  + (f"; the oldest release bundle is {oldest}{self.oldest_note}" if oldest else ""))
        return max(below)[1]

    def known_releases(self) -> tuple[str, ...]:
        """The releases this engine's argument registry knows, oldest first."""
        return ()

    def unknown_release_note(self, name: str, bundle: str) -> Optional[str]:
        """For a release name `bundle` answers for: a note when the release is not one this engine's
        registry knows (newer than the newest, say), naming the bundle that answers; None when known."""
        from nsa_policy.base.versions import parse_version

        release = self.release_of_bundle_name(name)
        known = self.known_releases()
        if release is None or not known:
            return None
        want = parse_version(release, field="policy")
        if any(parse_version(k) == want or (self.minor_releases and parse_version(k).release[:2] == want.release[:2])
               for k in known):  # a minor-release engine's bundle covers the series' patches
            return None
        title = self.title or self.name
        newest = max(known, key=parse_version)
        where = (f"newer than the newest release nsa-policy knows ({newest})" if want > parse_version(newest)
                 else "not a release nsa-policy knows")
        return f"{title} {release} is {where}; {bundle}'s rules, the newest bundle at or below it, answer for it"

    def bundle_for(self, policy: str) -> str:
        return self.default_bundle if policy == "default" else policy

    # ------------------------------------------------------------------ inputs
    def config_from(self, obj: Any) -> ServingConfig:
        """A ServingConfig from what a caller passes: field names, with this engine's name."""
        from nsa_policy.core.facts import ServingConfig
        from nsa_policy.inputs import validate_config

        if obj is None:
            return ServingConfig(engine=self.name)
        if isinstance(obj, ServingConfig):
            return obj if obj.engine == self.name else obj.model_copy(update={"engine": self.name})
        names = {**{f: f for f in ServingConfig.model_fields}, **self.arguments}
        if isinstance(obj, Mapping):
            items = list(obj.items())
        else:
            items = [(n, getattr(obj, n)) for n in names if getattr(obj, n, None) is not None]
        values: dict[str, Any] = {}
        for key, value in items:
            name = str(key).lstrip("-")
            field = names.get(name, names.get(name.replace("-", "_")))
            if field is None or field == "engine":
                if field is None:
                    from nsa_policy.base.errors import InputError, closest

                    near = closest(name, list(names))
                    raise InputError(f"config.{key}", value, hint=f"not a {self.title} argument"
                                     + (f"; did you mean {near!r}?" if near else ""))
                continue
            if value is not None:
                values[field] = value
        values["engine"] = self.name
        return validate_config(values)

    def spellings_from(self, obj: Any) -> tuple[str, ...]:
        """The engine's flags a mapping spells (its flag-form keys), in order."""
        return ()

    def config_at_release(self, config: ServingConfig, release: Optional[str]) -> ServingConfig:
        """The configuration as the release targeted (None: the newest) reads it once its own renames of
        deprecated values have run, before any resolution. The engine's own start-up code decides."""
        return config

    def seed_outputs(self, ns: Any) -> Iterator[tuple[str, Any, str, str]]:
        """The user's explicit values that are outputs from the start: (output, value, source, detail)."""
        for out in ("kv_cache_dtype", "page_size"):
            if ns[f"config.{out}"] not in (None, "auto"):
                yield out, ns[f"config.{out}"], "user", "--" + out.replace("_", "-")

    # ------------------------------------------------------------------ the namespace
    def config_facts(self, config: ServingConfig) -> dict[str, Any]:
        """config.* facts read in this engine's own names (the KV dtype as the engine spells it)."""
        raw = config.kv_cache_dtype
        return {"config.kv_cache_dtype": raw if raw is not None else "auto"}

    def env_variables(self) -> tuple[str, ...]:
        """The process environment variables this engine's DSA start-up reads (kept as given in the facts)."""
        return ()

    def env_fact_paths(self) -> tuple[str, ...]:
        """The `env.*` facts `env_facts` computes (known to rule validation)."""
        return ()

    def env_facts(self, env: Any) -> dict[str, Any]:
        """`env.*` facts from the environment's variables, parsed as this engine parses them."""
        return {}

    def fact_paths(self) -> tuple[str, ...]:
        """The facts of this engine's family (`<name>.<what>`), for `schema` and rule validation."""
        return ()

    def known_fact(self, what: str) -> bool:
        """Whether `<name>.<what>` is one of this engine's facts (a pattern may cover many)."""
        return what in {p.partition(".")[2] for p in self.fact_paths()}

    def fact(self, ns: Any, what: str) -> Any:
        """The value of `<name>.<what>`, computed on access; KeyError when it is not a fact."""
        raise KeyError(f"{self.name}.{what}")

    def fact_inputs(self, what: str) -> Optional[frozenset[str]]:
        """The inputs `<name>.<what>` depends on (None: everything)."""
        return None

    def fact_outputs(self, what: str) -> tuple[str, ...]:
        """The outputs `<name>.<what>` is computed from."""
        return ()

    # ------------------------------------------------------------------ the rule language
    def value_kinds(self) -> dict[str, Any]:
        """Value forms this engine adds to a rule's `set`: name → compile(output, argument, err) → ValueSpec."""
        return {}

    def set_problem(self, output: str, value: Any) -> Optional[str]:
        """What is wrong with a compiled `set` value in this engine's terms (an unknown backend name)."""
        return None

    def alternatives_kinds(self) -> tuple[Any, ...]:
        """AlternativesKind entries this engine adds to `emit.alternatives`."""
        return ()

    def lists_backend(self, catalog: Catalog, backend: str, phase: str, release: str) -> bool:
        """Does `release` of this engine accept `backend` for `phase`? (Alternatives offer only those.)"""
        return True

    # ------------------------------------------------------------------ check
    def space(self, bundles: Sequence[Any], catalog: Optional[Catalog] = None) -> Any:
        """The input space `check` and `diff` walk for this engine's bundles."""
        from nsa_policy import engines
        from nsa_policy.verify.space import standard_space

        return standard_space(bundles, catalog, engine=None if self.name == engines.DEFAULT else self.name)

    def invariant_titles(self) -> dict[str, str]:
        """name → what it says, for the invariants `invariants` checks."""
        return {}

    def invariants(self, decision: Decision, facts: Facts, catalog: Catalog) -> list[Any]:
        """(invariant, detail key, message) for each invariant a non-compatibility decision breaks."""
        return []

    def value_domains(self, catalog: Catalog, domains: dict[str, tuple[list[str], str]]) -> None:
        """Narrow or extend, in place, the literal values this engine's rules may name."""

    # ------------------------------------------------------------------ the CLI
    def resolve_cli(self, given: dict[str, Any], **kwargs: Any) -> None:
        """`resolve` for this engine when it has its own view (prints and exits); the default returns, and
        the command's engine-neutral path resolves."""
        return None

    # ------------------------------------------------------------------ launch and lint
    # An engine's own lint module (engines/<name>/lint.py) defines launch_start, parse_cli, lint_launch
    # and image_pins; each hook below calls it when set, else the engine-neutral default.
    lint_module: Optional[str] = None

    def _lint(self, name: str) -> Any:
        if self.lint_module is None:
            return None
        import importlib

        return getattr(importlib.import_module(self.lint_module), name, None)

    def server_image(self, image: str) -> bool:
        """Whether a container image's own ENTRYPOINT is this engine's server (so a container that keeps
        it passes its `args`/`command` to the server): lint reads those as a launch of this engine."""
        own = self._lint("server_image")
        return bool(own(image)) if own is not None else False

    def config_launch(self, node: Any, keys: Sequence[str], path: str, loc: Any) -> Any:
        """A config-file mapping this engine's server reads (its flag names as keys), as a lint Launch;
        None when the mapping is not one. `loc(node)` places a YAML node."""
        own = self._lint("config_launch")
        return own(node, keys, path, loc) if own is not None else None

    def launch_start(self, words: Sequence[str]) -> Optional[int]:
        """Where this engine's server command starts among a command's words (None: not this engine)."""
        own = self._lint("launch_start")
        return own(words) if own is not None else None

    def parse_cli(self, tokens: Sequence[Any]) -> Any:
        """A launch's arguments from its tokens ((text, location, unresolved) triples)."""
        own = self._lint("parse_cli")
        if own is not None:
            return own(tokens)
        from nsa_policy.lint.cliargs import parse_cli

        return parse_cli(list(tokens))

    def lint_launch(self, checker: Any, launch: Any) -> list[Any]:
        """Lint's findings for one launch of this engine: by default its arguments read through
        `arguments` and decided with its bundle on each device the file names."""
        own = self._lint("lint_launch")
        if own is not None:
            return own(checker, launch)
        from nsa_policy.lint.generic import lint_generic

        return lint_generic(self, checker, launch)

    def image_pins(self) -> tuple[tuple[str, str], ...]:
        """(image regex, pin regex) that name this engine's release in deployment files."""
        own = self._lint("image_pins")
        return own() if own is not None else ()

    def is_launch_command(self, argv: Sequence[str]) -> bool:
        return self.launch_start(list(argv)) is not None

    # the `nsa-policy launch` option naming the release a command starts (None: the engine has none)
    launch_version_flag: Optional[str] = None

    def launch_cli(self, argv: list[str], *, policy: str, device: str, model: Optional[str], version: Optional[str],
                   dry_run: bool, as_json: bool, log_decisions: Optional[str] = None) -> None:
        """`nsa-policy launch` for this engine's command: print the plan (--dry-run) or exec it. By default
        the engine's arguments are read through `arguments` and the decided outputs the command leaves
        unset are appended as its flags; sglang and vLLM respell per release in their own packages."""
        from nsa_policy.integration.generic_launch import launch_cli

        launch_cli(self, argv, policy=policy, device=device, model=model, dry_run=dry_run, as_json=as_json,
                   log_decisions=log_decisions)

    def matrix_cli(self, out_dir: Optional[Path], policy: str, fmt: str, image: Optional[str]) -> bool:
        """`matrix` for this engine when it has its own view (True: printed or written); the default
        leaves the catalog's backend × device × KV dtype view to the command."""
        return False

    def __repr__(self) -> str:
        return f"<Engine {self.name}>"

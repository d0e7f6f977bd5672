"""sglang: everything nsa-policy knows about it, behind one registered `Engine`.

Its argument registry (args.py over rules/catalog/sglang/args.yaml), the way its configuration is
read (config.py), its namespace facts (facts.py), its invariants, launch, replay and release
changelog. Submodules load on first use: importing the engine object costs nothing.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional

from nsa_policy.engines.base import Engine


class SglangEngine(Engine):
    name = "sglang"
    title = "sglang"
    default_bundle = "default"
    # input fields at fault (Finding.fields) → the space dimension that varies them
    field_dims = {"kv_cache_dtype": "kv_cache_dtype", "prefill_backend": "prefill", "decode_backend": "decode",
                  "tp_size": "parallel", "dp_size": "parallel", "enable_dp_attention": "parallel",
                  "enable_hisparse": "hisparse", "disable_radix_cache": "hisparse", "page_size": "extra",
                  "quantization": "extra", "dense_attn_kv_len_threshold": "threshold"}
    # sglang runs one kernel family for prefill and one for decode
    own_outputs = frozenset({"prefill_backend", "decode_backend"})
    # (output, config field, the flag that sets it): explicit values are outputs from the start
    _SEEDS = (("prefill_backend", "prefill_backend", "--nsa-prefill-backend"),
              ("decode_backend", "decode_backend", "--nsa-decode-backend"),
              ("page_size", "page_size", "--page-size"),
              # a forced --attention-backend: sglang keeps it, and sets dsa only when all are unset
              ("attention_backend", "attention_backend", "--attention-backend"))

    oldest_note = " (sglang-pre-21783 is 0.5.10rc0's policy)"
    judges_spellings = True  # a release refuses or deprecates a flag's spelling

    def known_releases(self) -> tuple[str, ...]:
        from nsa_policy.engines.sglang.args import load_args

        return tuple(load_args().releases)

    def config_from(self, obj: Any) -> Any:
        from nsa_policy.engines.sglang.config import config_from

        return config_from(obj)

    def spellings_from(self, obj: Any) -> tuple[str, ...]:
        from nsa_policy.engines.sglang.config import spellings_from

        return spellings_from(obj)

    def config_facts(self, config: Any) -> dict[str, Any]:
        from nsa_policy.engines.sglang.config import KV_ALIASES

        raw = config.kv_cache_dtype
        return {"config.kv_cache_dtype": KV_ALIASES.get(raw, raw) if raw is not None else "auto"}

    def config_at_release(self, config: Any, release: Optional[str]) -> Any:
        from nsa_policy.engines.sglang.config import config_at_release

        return config_at_release(config, release)

    def seed_outputs(self, ns: Any) -> Iterator[tuple[str, Any, str, str]]:
        from nsa_policy.catalog.store import KV_DTYPES
        from nsa_policy.core.namespace import threshold_detail

        kv = ns["config.kv_cache_dtype"]
        if kv in KV_DTYPES:
            yield "kv_cache_dtype", kv, "user", "--kv-cache-dtype"
        for out, key, flag in self._SEEDS:
            if ns[f"config.{key}"] is not None:
                yield out, ns[f"config.{key}"], "user", flag
        if ns["input.threshold"] is not None:
            source = "user" if ns["input.threshold_source"] == "flag" else "env"
            yield "dense_attn_kv_len_threshold", ns["input.threshold"], source, threshold_detail(ns) or ""

    # the sglang.<release>.* facts
    def env_variables(self) -> tuple[str, ...]:
        from nsa_policy.engines.sglang.env import variables

        return variables()

    def env_fact_paths(self) -> tuple[str, ...]:
        from nsa_policy.engines.sglang.env import FACT_PATHS

        return FACT_PATHS

    def env_facts(self, env: Any) -> dict[str, Any]:
        from nsa_policy.engines.sglang.env import env_facts

        return env_facts(env)

    def fact_paths(self) -> tuple[str, ...]:
        from nsa_policy.engines.sglang.facts import PATHS

        return PATHS

    def known_fact(self, what: str) -> bool:
        from nsa_policy.engines.sglang.facts import known

        return known(what)

    def fact(self, ns: Any, what: str) -> Any:
        from nsa_policy.engines.sglang.facts import sglang_fact

        return sglang_fact(ns, what)

    def fact_inputs(self, what: str) -> Optional[frozenset[str]]:
        from nsa_policy.engines.sglang.facts import fact_inputs

        return fact_inputs(what)

    def fact_outputs(self, what: str) -> tuple[str, ...]:
        from nsa_policy.engines.sglang.facts import fact_outputs

        return fact_outputs(what)

    def alternatives_kinds(self) -> tuple[Any, ...]:
        from nsa_policy.core.alternatives import AlternativesKind
        from nsa_policy.engines.sglang.facts import CHUNK_READS, chunk_alternatives

        return (AlternativesKind(
            "sglang_choices", "the backends an sglang release lists as --nsa/--dsa-*-backend choices",
            "an sglang release, e.g. \"0.5.10\"", lambda a: isinstance(a, str),
            lambda a: (), lambda a, ns, catalog: tuple(catalog.sglang_choices(str(a)))), AlternativesKind(
            "chunked_prefill_sizes", "the nearest --chunked-prefill-size values whose per-rank share (divided by the "
            "attention-DP width) the page size divides, and -1 (off)", "true",
            lambda a: a is True, lambda a: CHUNK_READS,
            lambda a, ns, catalog: chunk_alternatives(ns)))

    def lists_backend(self, catalog: Any, backend: str, phase: str, release: str) -> bool:
        # the release's --nsa/--dsa-<phase>-backend choices (backends.yaml sglang_choice)
        return bool(catalog.sglang_lists(backend, phase, release))

    def invariant_titles(self) -> dict[str, str]:
        from nsa_policy.engines.sglang.invariants import INVARIANTS

        return dict(INVARIANTS)

    def invariants(self, decision: Any, facts: Any, catalog: Any) -> list[Any]:
        from nsa_policy.engines.sglang.invariants import check_invariants

        return check_invariants(decision, facts, catalog)

    def value_domains(self, catalog: Any, domains: dict[str, tuple[list[str], str]]) -> None:
        # A rule may name any KV dtype some release's --kv-cache-dtype lists (its KV-cache hooks judge the
        # non-DSA ones: mxfp8, nvfp4, fp4_mx_block16), in the canonical spelling config facts carry.
        from nsa_policy.engines.sglang.args import load_args
        from nsa_policy.engines.sglang.config import KV_ALIASES

        listed = (KV_ALIASES.get(v, v) for c in load_args().argument("kv_cache_dtype").choices for v in c.values)
        domains["config.kv_cache_dtype"] = (list(dict.fromkeys(listed)), "sglang KV dtype")
        # where a release leaves the KV dtype as given (Intel XPU from 0.5.12) the resolved one is any of these
        out_valid = domains["out.kv_cache_dtype"][0]
        domains["out.kv_cache_dtype"] = (list(dict.fromkeys([*out_valid, *domains["config.kv_cache_dtype"][0]])),
                                         "sglang KV dtype")

    lint_module = "nsa_policy.engines.sglang.lint"  # its launch_start, parse_cli, lint_launch, image_pins

    launch_version_flag = "--sglang-version"

    def launch_cli(self, argv: list[str], **kwargs: Any) -> None:
        from nsa_policy.engines.sglang.launch_cli import launch_cli

        launch_cli(argv, **kwargs)



ENGINE = SglangEngine()

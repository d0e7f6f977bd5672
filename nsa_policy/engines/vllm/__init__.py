"""vLLM: everything nsa-policy knows about it, behind one registered `Engine`.

Its backend and argument catalog (catalog.py over rules/catalog/vllm/*.yaml), the way its
configuration is read (config.py), its namespace facts (facts.py), its input space, invariants,
launch, lint and matrix. Submodules load on first use.
"""
from __future__ import annotations

from typing import Any, Iterator, Optional, Sequence

from nsa_policy.engines.base import Engine


class VllmEngine(Engine):
    name = "vllm"
    title = "vLLM"
    default_bundle = "vllm-default"
    minor_releases = True  # vllm-0.33 answers for 0.33.*
    field_dims = {"kv_cache_dtype": "kv_cache_dtype", "attention_backend": "attention_backend",
                  "tp_size": "parallel", "dcp_size": "parallel", "page_size": "block_size",
                  "indexer_kv_dtype": "extra"}
    # vLLM runs one attention backend for prefill and decode, and no dense threshold where short
    # prefills stay sparse (the vllm-dense-prefill invariant checks that)
    optional_outputs = frozenset({"prefill_backend", "decode_backend", "dense_attn_kv_len_threshold"})
    own_outputs = frozenset({"requested_kv_cache_dtype", "indexer_cache_dtype"})
    # resolve's own flags for the config fields that are not sglang serving options
    resolve_flags = {"attention_backend": "--attention-backend", "page_size": "--block-size"}

    def known_releases(self) -> tuple[str, ...]:
        from nsa_policy.engines.vllm.catalog import load_vllm

        return tuple(load_vllm().args_doc.releases)

    def config_from(self, obj: Any) -> Any:
        from nsa_policy.engines.vllm.config import config_from

        return config_from(obj)

    def config_facts(self, config: Any) -> dict[str, Any]:
        # vLLM's own names, no sglang aliases (bf16 is not a vLLM dtype); backends are enum names
        raw, backend = config.kv_cache_dtype, config.attention_backend
        return {"config.kv_cache_dtype": raw if raw is not None else "auto",
                "config.attention_backend": None if backend is None or backend.lower() == "auto" else backend.upper()}

    def seed_outputs(self, ns: Any) -> Iterator[tuple[str, Any, str, str]]:
        # A forced --attention-backend and a --block-size are outputs as given. The KV dtype is not:
        # the bundle's model-hook rules read the flag, and vLLM rewrites it after selection.
        from nsa_policy.engines.vllm.catalog import load_vllm

        forced = ns["config.attention_backend"]
        # MiniMax's MSA decode-kernel aliases leave the backend to automatic selection (AttentionConfig)
        if forced is not None and ns["vllm.backend_known"] and forced.upper() not in load_vllm().doc.automatic_aliases:
            yield "attention_backend", forced, "user", "--attention-backend"
        if ns["config.page_size"] is not None:
            yield "page_size", ns["config.page_size"], "user", "--block-size"

    # the vllm.* facts
    def fact_paths(self) -> tuple[str, ...]:
        from nsa_policy.engines.vllm.facts import FACTS

        return tuple(f"vllm.{k}" for k in FACTS)

    def fact(self, ns: Any, what: str) -> Any:
        from nsa_policy.engines.vllm.facts import FACTS, vllm_fact

        if what not in FACTS:
            raise KeyError(f"vllm.{what}")
        return vllm_fact(ns, what)

    def fact_inputs(self, what: str) -> Optional[frozenset[str]]:
        from nsa_policy.engines.vllm.facts import INPUTS

        return INPUTS.get(what)

    def fact_outputs(self, what: str) -> tuple[str, ...]:
        from nsa_policy.engines.vllm.facts import INPUTS, OUTPUTS_READ

        return () if what in INPUTS else OUTPUTS_READ

    def value_kinds(self) -> dict[str, Any]:
        return {"vllm_first_valid": _compile_first_valid}

    def set_problem(self, output: str, value: Any) -> Optional[str]:
        if output != "attention_backend":
            return None  # only vLLM's backend names are vLLM's to check (and its catalog stays unloaded)
        from nsa_policy.engines.vllm.values import set_problem

        return set_problem(output, value)

    def alternatives_kinds(self) -> tuple[Any, ...]:
        from nsa_policy.engines.vllm.alternatives import KINDS

        return KINDS

    def space(self, bundles: Sequence[Any], catalog: Any = None) -> Any:
        from nsa_policy.engines.vllm.space import vllm_space

        return vllm_space(catalog)

    def invariant_titles(self) -> dict[str, str]:
        from nsa_policy.engines.vllm.invariants import VLLM_INVARIANTS

        return dict(VLLM_INVARIANTS)

    def invariants(self, decision: Any, facts: Any, catalog: Any) -> list[Any]:
        from nsa_policy.engines.vllm.invariants import check_vllm_invariants

        return check_vllm_invariants(decision, facts, catalog)

    def value_domains(self, catalog: Any, domains: dict[str, tuple[list[str], str]]) -> None:
        # vLLM's KV dtypes and backend enum names (rules/catalog/vllm/*.yaml), not sglang's
        from nsa_policy.engines.vllm.catalog import load_vllm

        v = load_vllm()
        vkv = list(v.argument("kv_cache_dtype").choices or ())
        for key in ("config.prefill_backend", "config.decode_backend", "out.prefill_backend",
                    "out.decode_backend", "cap.prefill.status", "cap.decode.status"):
            domains.pop(key, None)
        domains.update({
            "config.kv_cache_dtype": (vkv, "vLLM KV dtype"),
            "out.kv_cache_dtype": (vkv, "vLLM KV dtype"),
            "out.requested_kv_cache_dtype": (vkv, "vLLM KV dtype"),
            "config.attention_backend": (v.backend_names, "vLLM attention backend"),
            "out.attention_backend": (v.backend_names, "vLLM attention backend"),
            "config.indexer_kv_dtype": (list(v.doc.indexer.cache_dtypes), "DSA indexer dtype"),
            "out.indexer_cache_dtype": (sorted(set(v.doc.indexer.cache_dtypes.values())), "DSA indexer cache dtype")})

    def resolve_cli(self, given: dict[str, Any], **kwargs: Any) -> None:
        from nsa_policy.engines.vllm.cli import resolve_cli

        resolve_cli(given, **kwargs)

    def matrix_cli(self, out_dir: Any, policy: str, fmt: str, image: Optional[str]) -> bool:
        from nsa_policy.engines.vllm.cli import matrix_cli

        return matrix_cli(out_dir, policy, fmt, image)

    lint_module = "nsa_policy.engines.vllm.lint"  # its launch_start, parse_cli, lint_launch, image_pins

    launch_version_flag = "--vllm-version"

    def launch_cli(self, argv: list[str], **kwargs: Any) -> None:
        from nsa_policy.engines.vllm.cli import launch_cli

        launch_cli(argv, **kwargs)


def _compile_first_valid(out: str, arg: Any, err: Any) -> Any:
    from nsa_policy.engines.vllm.values import compile_first_valid  # loaded only by a rule that uses the form

    return compile_first_valid(out, arg, err)


ENGINE = VllmEngine()

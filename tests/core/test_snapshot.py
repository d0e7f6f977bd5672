"""Snapshots of the shipped rule files (base/snapshot.py): the same documents as parsing gives, used
only while the bytes and the code are unchanged, and never a reason for a different answer."""
from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from nsa_policy.base import snapshot
from nsa_policy.base.paths import packaged_rules_dir
from nsa_policy.base.schema_load import load_doc
from nsa_policy.catalog.codes import CodeRegistry
from nsa_policy.catalog.store import BackendCatalog, DeviceCatalog, ModelCatalog
from nsa_policy.core.bundle import BundleFile, StageFile
from nsa_policy.engines.sglang.args import ArgsDoc


def _shipped_docs() -> list[tuple[type, Path]]:
    root = packaged_rules_dir()
    assert root is not None
    docs: list[tuple[type, Path]] = [(DeviceCatalog, root / "catalog" / "devices.yaml"),
                                     (ModelCatalog, root / "catalog" / "models.yaml"),
                                     (BackendCatalog, root / "catalog" / "backends.yaml"),
                                     (ArgsDoc, root / "catalog" / "sglang" / "args.yaml"),
                                     (CodeRegistry, root / "codes.yaml")]
    for folder in sorted((root / "policy").iterdir()):
        if (folder / "bundle.yaml").is_file():
            docs.append((BundleFile, folder / "bundle.yaml"))
            docs += [(StageFile, p) for p in sorted(folder.glob("*.yaml")) if p.name != "bundle.yaml"]
    return docs


def _lines(data: object) -> object:
    """The line numbers a document's data carries (what errors and provenance point at)."""
    if isinstance(data, dict):
        return (getattr(data, "line", None), dict(getattr(data, "key_lines", {})),
                {k: _lines(v) for k, v in data.items()})
    if isinstance(data, list):
        return (getattr(data, "line", None), list(getattr(data, "item_lines", [])), [_lines(v) for v in data])
    return data


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.delenv("NSA_POLICY_NO_SNAPSHOT", raising=False)
    monkeypatch.setattr(snapshot, "_folders", lambda: (tmp_path / "snap",))
    return tmp_path / "snap"


def test_every_shipped_document_from_its_snapshot_equals_the_parsed_one(folder, monkeypatch) -> None:
    docs = _shipped_docs()
    assert len(docs) > 20
    for schema, path in docs:
        assert snapshot.enabled(path), path
        monkeypatch.setenv("NSA_POLICY_NO_SNAPSHOT", "1")
        parsed, parsed_data = load_doc(schema, path)
        monkeypatch.delenv("NSA_POLICY_NO_SNAPSHOT")
        first, _ = load_doc(schema, path)  # parses and writes the snapshot
        again, again_data = load_doc(schema, path)  # read back from it
        assert again.model_dump() == first.model_dump() == parsed.model_dump(), path
        assert _lines(again_data) == _lines(parsed_data), path
    assert len(list(folder.glob("*.pickle"))) == len(docs)


def test_a_snapshot_is_read_back_not_rebuilt(folder) -> None:
    calls = []
    path = _shipped_docs()[0][1]
    raw = path.read_bytes()
    for _ in range(3):
        assert snapshot.cached(path, raw, DeviceCatalog, lambda: calls.append(1) or "built") == "built"
    assert calls == [1]


def test_changed_bytes_another_schema_or_damage_rebuild(folder) -> None:
    path = _shipped_docs()[0][1]
    raw = path.read_bytes()
    assert snapshot.cached(path, raw, DeviceCatalog, lambda: "v1") == "v1"
    assert snapshot.cached(path, raw + b"\n# edited\n", DeviceCatalog, lambda: "v2") == "v2"
    assert snapshot.cached(path, raw, ModelCatalog, lambda: "v3") == "v3"
    for file in folder.glob("*.pickle"):
        file.write_bytes(b"not a pickle")
    assert snapshot.cached(path, raw, DeviceCatalog, lambda: "v4") == "v4"
    # a snapshot whose stored key is not this one (a hash-prefix collision, a copied file) is not used
    for file in folder.glob("*.pickle"):
        file.write_bytes(pickle.dumps(("another key", "stale")))
    assert snapshot.cached(path, raw, DeviceCatalog, lambda: "v5") == "v5"


def test_an_unwritable_place_gives_the_same_answer_and_no_snapshot(tmp_path, monkeypatch) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("a file where the folder would be")
    monkeypatch.setattr(snapshot, "_folders", lambda: (blocked / "snap",))
    path = _shipped_docs()[0][1]
    assert snapshot.cached(path, path.read_bytes(), DeviceCatalog, lambda: "answer") == "answer"
    assert not (blocked / "snap").exists()


def test_user_rule_folders_are_never_snapshotted(tmp_path, monkeypatch) -> None:
    user = tmp_path / "bundle.yaml"
    user.write_text("name: mine\n")
    assert not snapshot.enabled(user)
    monkeypatch.setenv("NSA_POLICY_NO_SNAPSHOT", "1")
    assert not snapshot.enabled(_shipped_docs()[0][1])


def test_the_snapshot_folder_is_ignored_by_git() -> None:
    root = Path(__file__).resolve().parents[2]
    assert "__snapshot__/" in (root / ".gitignore").read_text().splitlines()
    assert os.sep + "__snapshot__" not in str(packaged_rules_dir())


def _decision_view(bundle_name: str) -> list[object]:
    """Decisions of one bundle on a few inputs, as JSON: what a compiled bundle is for."""
    from nsa_policy import build_facts, decide

    out = []
    for device, extra in (("h200", {}), ("b200", {"kv_cache_dtype": "fp8_e4m3"}), ("gb10", {}),
                          ("mi300x", {}), ("h20", {"dcp_size": 2, "tp_size": 8})):
        facts = build_facts(extra, device=device, model="deepseek-ai/DeepSeek-V3.2")
        d = decide(facts, bundle_name, trace=True)
        out.append(d.model_dump(mode="json", exclude={"decision_id", "timestamp"}))
    return out


def test_a_compiled_bundle_from_its_snapshot_decides_as_a_fresh_compile(folder, monkeypatch) -> None:
    from nsa_policy.core import bundle as bundle_mod

    for name in ("default", "sglang-0.5.23", "sglang-0.5.12"):
        monkeypatch.setenv("NSA_POLICY_NO_SNAPSHOT", "1")
        bundle_mod._cached.cache_clear()
        bundle_mod._BY_ARG.clear()
        fresh = _decision_view(name)
        monkeypatch.delenv("NSA_POLICY_NO_SNAPSHOT")
        real = bundle_mod.compile_bundle
        compiled: list[str] = []
        def counted(n: str, *a: object, real=real, compiled=compiled, **k: object):  # type: ignore[no-untyped-def]
            compiled.append(n)
            return real(n, *a, **k)

        monkeypatch.setattr(bundle_mod, "compile_bundle", counted)
        for _ in range(2):  # the first compiles and writes the snapshot, the second reads it back
            bundle_mod._cached.cache_clear()
            bundle_mod._BY_ARG.clear()
            assert _decision_view(name) == fresh, name
        assert len(compiled) == 1  # sglang-0.5.23 compiles as the bundle that answers for it
        monkeypatch.setattr(bundle_mod, "compile_bundle", real)
    assert len(list(folder.glob("*.pickle"))) >= 3
    bundle_mod._cached.cache_clear()
    bundle_mod._BY_ARG.clear()


def test_a_compiled_bundle_snapshot_is_keyed_by_every_shipped_rule_file(folder, tmp_path, monkeypatch) -> None:
    calls: list[int] = []
    assert snapshot.cached_over_rules("bundle:x", lambda: calls.append(1) or "v1") == "v1"
    assert snapshot.cached_over_rules("bundle:x", lambda: calls.append(1) or "v2") == "v1"
    assert snapshot.cached_over_rules("bundle:y", lambda: calls.append(1) or "v3") == "v3"
    # a rule file that changes (here: its mtime, as an edit sets it) gives another key
    root = packaged_rules_dir()
    assert root is not None
    target = root / "catalog" / "devices.yaml"
    st = target.stat()
    try:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000))
        assert snapshot.cached_over_rules("bundle:x", lambda: calls.append(1) or "v4") == "v4"
    finally:
        os.utime(target, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert snapshot.cached_over_rules("bundle:x", lambda: calls.append(1) or "v5") == "v1"
    monkeypatch.setenv("NSA_POLICY_NO_SNAPSHOT", "1")
    assert snapshot.cached_over_rules("bundle:x", lambda: "off") == "off"
    assert len(calls) == 3

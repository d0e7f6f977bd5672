"""The running engine's release, as the plugins read it (plugin_common.engine_release)."""
import importlib
import sys

from nsa_policy.integration import plugin_common as pc


def _install(root, name, version):
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text("")
    (root / f"{name}-{version}.dist-info").mkdir()
    (root / f"{name}-{version}.dist-info" / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_the_release_is_the_dist_info_beside_the_imported_package(tmp_path, monkeypatch) -> None:
    name = "nsa_fake_engine"
    _install(tmp_path / "imported", name, "0.5.23")
    # a second install later on sys.path: importlib.metadata may list it, but it is not what runs
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / f"{name}-0.5.10.dist-info").mkdir()
    (tmp_path / "other" / f"{name}-0.5.10.dist-info" / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.5.10\n")
    monkeypatch.syspath_prepend(str(tmp_path / "other"))
    monkeypatch.syspath_prepend(str(tmp_path / "imported"))
    monkeypatch.delitem(pc._RELEASES, name, raising=False)
    importlib.import_module(name)
    try:
        assert pc.engine_release(name) == "0.5.23"
        assert pc._RELEASES[name] == "0.5.23"  # read once per process
    finally:
        sys.modules.pop(name, None)
        pc._RELEASES.pop(name, None)


def test_no_engine_installed_gives_none(monkeypatch) -> None:
    monkeypatch.delitem(pc._RELEASES, "nsa_no_such_engine", raising=False)
    assert pc.engine_release("nsa_no_such_engine") is None
    pc._RELEASES.pop("nsa_no_such_engine", None)

"""The store of parsed catalogs: the same catalog as a parse, a new parse whenever any
input changes, and a silent parse when the store is corrupt or cannot be written."""

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import pytest

from topomodel.inputs import catalog as catalog_module
from topomodel.inputs.catalog import Catalog, load_catalog
from topomodel.inputs.parts import Switch
from topomodel.inputs.store import catalogstore

ROOT = Path(__file__).resolve().parents[2]
USER = """\
switches:
  my-switch:
    name: My switch
    vendor: Acme
    protocol: infiniband
    ports: 64
    port_rate: "{RATE} /dir"
    latency: "600 ns"
    source: a datasheet
    provenance: assumed
"""


@pytest.fixture
def store(tmp_path):
    """The store on, in a fresh folder; off again after the test."""
    folder = tmp_path / "store"
    catalogstore.enable(folder, "units-key")
    try:
        yield folder
    finally:
        catalogstore.disable()


def _parsed(paths=()):
    """A catalog parsed with the store off."""
    was = catalogstore._folder, catalogstore._base
    catalogstore.disable()
    try:
        return load_catalog(paths)
    finally:
        catalogstore._folder, catalogstore._base = was


def _no_parse(monkeypatch):
    """Make any parse fail, so a load that succeeds came from the store."""
    def refuse(*_):
        raise AssertionError("parsed instead of read from the store")
    monkeypatch.setattr(catalog_module, "_parse", refuse)


def test_a_kept_catalog_is_the_parsed_one(store, monkeypatch):
    first = load_catalog()
    assert len(list(store.glob("catalog-*.pickle"))) == 1
    parsed = _parsed()
    _no_parse(monkeypatch)
    kept = load_catalog()
    assert isinstance(kept, Catalog) and kept is not first
    assert kept == parsed and repr(kept) == repr(parsed)  # every figure, to the bit
    assert pickle.dumps(kept) == pickle.dumps(parsed)


def _user_file(tmp_path, rate):
    path = tmp_path / "mine.yaml"
    path.write_text(USER.replace("{RATE}", rate))
    return path


def test_a_changed_catalog_file_is_parsed_again(store, tmp_path):
    path = _user_file(tmp_path, "400 Gb/s")
    assert load_catalog([path]).get("my-switch", Switch).port_rate_Bps == 5e10
    path = _user_file(tmp_path, "800 Gb/s")
    assert load_catalog([path]).get("my-switch", Switch).port_rate_Bps == 1e11
    assert len(list(store.glob("catalog-*.pickle"))) == 2


def test_the_key_follows_every_input(store, tmp_path, monkeypatch):
    files = catalog_module.builtin_catalog_files()
    base = catalogstore.key_of(files)
    assert catalogstore.key_of(files) == base  # the same inputs, the same key
    assert catalogstore.key_of(files[:-1]) != base
    catalogstore.enable(store, "other units")  # unit definitions, kinds or pint
    assert catalogstore.key_of(files) != base
    code = tmp_path / "package"
    (code / "inputs").mkdir(parents=True)
    parts = code / "inputs" / "parts.py"
    parts.write_text("A = 1\n")
    monkeypatch.setattr(catalogstore, "_PACKAGE", code)
    keys = set()
    for text in ("A = 1\n", "A = 2\n"):  # the parsing code (the package's version)
        parts.write_text(text)
        catalogstore.enable(store, "units-key")
        keys.add(catalogstore.key_of(files))
    assert len(keys) == 2 and base not in keys


@pytest.mark.parametrize("content", [b"", b"not a pickle", pickle.dumps({"a": 1}),
                                     pickle.dumps(Catalog({}))[:-5]])
def test_a_corrupt_store_is_parsed_silently(store, content, capsys):
    load_catalog()
    [kept] = store.glob("catalog-*.pickle")
    kept.write_bytes(content)
    assert load_catalog() == _parsed()
    assert capsys.readouterr() == ("", "")
    assert pickle.loads(kept.read_bytes()) == _parsed()  # and written again


def test_an_unwritable_store_is_parsed_silently(tmp_path, capsys):
    blocker = tmp_path / "a file"
    blocker.write_text("")
    catalogstore.enable(blocker / "store", "units-key")  # a folder inside a file
    try:
        assert load_catalog() == _parsed()
        assert load_catalog() == _parsed()
    finally:
        catalogstore.disable()
    assert capsys.readouterr() == ("", "")
    assert not (blocker / "store").exists()


def test_a_library_caller_parses_every_time(tmp_path, monkeypatch):
    assert not catalogstore.enabled()
    assert catalogstore.key_of(catalog_module.builtin_catalog_files()) is None
    monkeypatch.setenv("TOPOMODEL_CACHE_DIR", str(tmp_path))
    load_catalog()
    assert not list(tmp_path.iterdir())


ROUTE = ["route", str(ROOT / "examples" / "dgx-h100-superpod.yaml"), "--collective",
         "allreduce", "--size", "8 Gb", "--format", "json"]


def _route(store):
    """``topomodel route``'s JSON in a fresh process, with the stores in ``store`` (or
    none: a library caller's parse)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOPOMODEL_CACHE_DIR": str(store)}
    code = "import json, sys; from topomodel.cli import main; main(json.loads(sys.argv[1]))"
    if store is None:
        code = code.replace("from topomodel.cli import main", "import topomodel.cli;"
                            " topomodel.cli.keep_unit_answers = lambda: None;"
                            " from topomodel.cli import main")
        env.pop("TOPOMODEL_CACHE_DIR")
    done = subprocess.run([sys.executable, "-c", code, json.dumps(ROUTE)], env=env,
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return done.stdout


def test_route_reads_the_same_figures_from_the_store(tmp_path):
    parsed = _route(None)
    assert _route(tmp_path) == parsed  # parsed and kept
    assert list(tmp_path.glob("catalog-*.pickle"))
    assert _route(tmp_path) == parsed  # read back


def test_the_store_keeps_the_newest_catalogs_only(store, tmp_path, monkeypatch):
    monkeypatch.setattr(catalogstore, "KEPT_CATALOGS", 2)
    for rate in ("100 Gb/s", "200 Gb/s", "400 Gb/s"):
        load_catalog([_user_file(tmp_path, rate)])
    assert len(list(store.glob("catalog-*.pickle"))) == 2
    kept = catalogstore.key_of([*catalog_module.builtin_catalog_files(),
                                _user_file(tmp_path, "400 Gb/s")])
    assert (store / f"catalog-{kept}.pickle").exists()  # the newest stays

"""The on-disk store of pint's answers: the same figures, and no pint once it is filled."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from topomodel.errors import UnitError
from topomodel.inputs import unitcache, units

ROOT = Path(__file__).resolve().parents[2]
ROUTE = ["route", str(ROOT / "examples" / "dgx-h100-superpod.yaml"), "--collective",
         "allreduce", "--size", "8 Gb", "--format", "json"]
PROBE = ("import json, sys; from topomodel.cli import main; main(json.loads(sys.argv[1]));"
         " print('pint' in sys.modules, file=sys.stderr)")


def _route(store: Path | None) -> tuple[str, str]:
    """(stdout, stderr) of ``topomodel route`` in a fresh process; ``store`` the folder
    of the answers, or None to ask pint as a library caller does."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    if store is None:
        code = PROBE.replace("from topomodel.cli import main",
                             "import topomodel.cli; from topomodel.cli import main;"
                             " topomodel.cli.keep_unit_answers = lambda: None")
    else:
        code, env[unitcache.CACHE_ENV] = PROBE, str(store)
    done = subprocess.run([sys.executable, "-c", code, json.dumps(ROUTE)], env=env,
                          capture_output=True, text=True, check=True, cwd=ROOT)
    return done.stdout, done.stderr.strip().splitlines()[-1]


def test_a_filled_store_gives_the_same_figures_without_pint(tmp_path):
    asked, pint_asked = _route(None)
    first, pint_first = _route(tmp_path)
    second, pint_second = _route(tmp_path)
    assert (pint_asked, pint_first, pint_second) == ("True", "True", "False")
    assert asked == first == second  # every figure, to the bit
    assert list(tmp_path.glob("units-*.json"))


def test_answers_read_back_are_pint_s_to_the_bit(tmp_path):
    units._unit_factor.cache_clear()
    units.bounds.cache_clear()
    try:
        unitcache.enable("test", tmp_path)
        asked = [units._unit_factor(u, "rate") for u in ("Gb/s", "GB/s", "GiB", "baud")]
        asked_bounds = units.bounds("rate")
        units._unit_factor.cache_clear()
        units.bounds.cache_clear()
        unitcache.enable("test", tmp_path)  # a new process: the file only
        assert [units._unit_factor(u, "rate") for u in ("Gb/s", "GB/s", "GiB", "baud")
                ] == asked == [1.25e8, 1e9, None, None]
        assert units.bounds("rate") == asked_bounds == (0.125, 1e18)
    finally:
        unitcache.disable()
        units._unit_factor.cache_clear()
        units.bounds.cache_clear()


def test_unit_name_is_pint_s_and_its_errors_name_what_was_written(tmp_path):
    try:
        unitcache.enable("test", tmp_path)
        assert units.unit_name("8 Gb") == str(units.quantity("8 Gb").units) == "gigabit"
        assert units.unit_name("3 GiB") == "gibibyte"
        with pytest.raises(UnitError, match="'8 furlongs'"):
            units.unit_name("8 furlongs")
    finally:
        unitcache.disable()


def test_a_store_that_cannot_be_written_still_answers(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a folder")
    try:
        unitcache.enable("test", blocked / "sub")
        unitcache.put("x", 1.5)
        assert unitcache.get("x") == (True, 1.5)
        assert not (blocked / "sub").exists()
    finally:
        unitcache.disable()


def test_a_malformed_store_is_ignored(tmp_path):
    (tmp_path / "units-test.json").write_text("[1, 2")
    try:
        unitcache.enable("test", tmp_path)
        assert unitcache.get("x") == (False, None)
    finally:
        unitcache.disable()

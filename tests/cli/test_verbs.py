"""The verbs' shape: one module per verb under ``cli/design_verbs/`` and
``cli/job_verbs/``, each with a docstring and ``run(args) -> Report``, each the ``run``
of the parser's verb of its name, none importing another."""

from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

from topomodel.cli.parser import Verb, build_parser
from topomodel.cli.reference import _parsers

CLI = Path(__file__).resolve().parents[2] / "topomodel" / "cli"
FOLDERS = ("design_verbs", "job_verbs")
MODULES = sorted(f"{folder}.{path.stem}" for folder in FOLDERS
                 for path in (CLI / folder).glob("*.py") if path.stem != "__init__")


def _verb_runs() -> dict[str, set[str]]:
    """Each verb (``catalog list`` under its verb) and the module its ``run`` names."""
    out: dict[str, set[str]] = {}
    for parser in _parsers(build_parser()):
        run = parser.get_default("run")
        if isinstance(run, Verb):
            verb = parser.prog.split()[1]  # 'topomodel catalog list' -> catalog
            out.setdefault(verb, set()).add(run.module)
    return out


def test_every_verb_runs_the_module_named_after_it():
    runs = _verb_runs()
    assert set(runs) == {m.split(".")[1].replace("_", "-") for m in MODULES}
    for verb, modules in runs.items():
        (module,) = modules
        assert module.rsplit(".", 1)[1] == verb.replace("-", "_")


@pytest.mark.parametrize("name", MODULES)
def test_a_verb_module_has_the_one_shape(name):
    module = importlib.import_module(f"topomodel.cli.{name}")
    assert module.__doc__ and module.__doc__.startswith("``topomodel ")
    signature = inspect.signature(module.run)
    assert list(signature.parameters) == ["args"]
    assert signature.return_annotation == "Report"


@pytest.mark.parametrize("name", MODULES)
def test_no_verb_module_imports_another(name):
    path = CLI.joinpath(*name.split(".")).with_suffix(".py")
    others = {f"topomodel.cli.{m}" for m in MODULES} | {
        f"topomodel.cli.{folder}" for folder in FOLDERS}
    found = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
             if (isinstance(node, ast.ImportFrom) and node.module in others)
             or (isinstance(node, ast.Import) and {a.name for a in node.names} & others)]
    assert not found, f"{path.name} imports another verb at lines {found}"


def test_a_verb_module_is_imported_only_when_its_verb_runs():
    import subprocess
    import sys

    code = ("import sys\nfrom topomodel.cli.parser import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in sys.modules if '_verbs.' in m))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"

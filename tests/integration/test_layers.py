"""The package's layers: imports flow down the data flow, never up; modules stay small.

Every ``import`` and ``from ... import`` statement under ``topomodel/`` is read with
``ast`` (inside functions and under ``if TYPE_CHECKING:`` too, since a lazy or
type-only import still couples the two modules), each imported ``topomodel.*`` module
is mapped to its layer, and an import from a lower layer to a higher one fails, naming
every offending ``file:line`` and the two layers.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

#: The layers of ``topomodel``, lowest first, as (name, top-level names in it). A top-level
#: name is a module directly in ``topomodel/`` (``catalog`` for ``topomodel/inputs/catalog.py``)
#: or a subpackage (``fabric`` for ``topomodel/fabric/``, with everything under it). A
#: module may import from its own layer and from any lower one, never from a higher one.
#: A module or subpackage missing from this table fails the test: place it here first.
#: The root ``topomodel/__init__.py`` is the public front door and in no layer: it may
#: reference anything (see :data:`EXEMPT`), and any module may import the root's own
#: names (``from topomodel import __version__``).
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("edge", ("errors", "arrays", "limits", "files", "parallel", "heap", "kept", "vocabulary",
              "inputs")),
    ("fabric", ("fabric",)),
    ("traffic", ("traffic",)),
    ("routing", ("routing",)),
    ("analysis", ("analysis",)),
    ("sweep", ("sweep", "plan", "calibrate")),
    ("draw", ("draw",)),
    ("report", ("report", "export")),
    ("cli", ("cli", "__main__")),
)

#: Files whose import statements are not checked: only the root front door, which has
#: plain imports of its public names.
EXEMPT = frozenset({"topomodel/__init__.py"})

#: The longest a module may be, in lines (as ``wc -l`` counts them).
MAX_LINES = 600

#: Modules allowed above :data:`MAX_LINES`, each with its reason. A listed module may
#: shrink below the limit (or be split away) without failing the test; drop its entry
#: then.
LONG_MODULES: dict[str, str] = {}

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "topomodel"
LAYER_OF = {top: index for index, (_, tops) in enumerate(LAYERS) for top in tops}


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def _relative(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_submodule(dotted: str) -> bool:
    """Whether ``topomodel.x.y`` names a module or package file in the source tree."""
    path = ROOT.joinpath(*dotted.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _imported(path: Path, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The ``topomodel`` modules a statement imports, as dotted names."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if node.level:
        package = _module_name(path).split(".")
        if path.name != "__init__.py":
            package.pop()
        base = package[: len(package) - node.level + 1]
        module = ".".join([*base, *([node.module] if node.module else [])])
    else:
        module = node.module or ""
    # ``from topomodel import fabric`` imports the subpackage; ``from topomodel import
    # __version__`` imports one of the root's own names.
    submodules = [f"{module}.{alias.name}" for alias in node.names
                  if _is_submodule(f"{module}.{alias.name}")]
    return submodules or [module]


def _top(dotted: str) -> str | None:
    """The top-level name under ``topomodel`` (None for the root or another package)."""
    parts = dotted.split(".")
    if parts[0] != "topomodel" or len(parts) == 1:
        return None
    return parts[1]


def _layer_name(index: int) -> str:
    return f"{index} ({LAYERS[index][0]})"


def test_layers_name_every_module_and_package_once():
    tops = [top for _, names in LAYERS for top in names]
    assert len(tops) == len(set(tops))
    present = {_top(_module_name(path)) for path in _sources()} - {None}
    missing = sorted(present - set(LAYER_OF))
    assert not missing, f"not in LAYERS (place them in a layer): {missing}"


def test_imports_never_go_up_a_layer():
    upward, unknown = [], []
    for path in _sources():
        name = _relative(path)
        if name in EXEMPT:
            continue
        own_top = _top(_module_name(path))
        own = LAYER_OF.get(own_top or "")
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=name)):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            for module in _imported(path, node):
                top = _top(module)
                if top is None:
                    continue
                layer = LAYER_OF.get(top)
                if own is None or layer is None:
                    unknown.append(f"{name}:{node.lineno}: {module} (layer unknown)")
                elif layer > own:
                    upward.append(f"{name}:{node.lineno}: imports {module}: layer "
                                  f"{_layer_name(own)} -> higher layer {_layer_name(layer)}")
    problems = upward + unknown
    assert not problems, (f"{len(problems)} import(s) against the layers:\n"
                          + "\n".join(problems))


def test_the_checker_resolves_relative_and_root_imports():
    # The oracle for the resolver itself: a relative import resolves like Python does.
    path = PACKAGE / "sweep" / "run.py"
    tree = ast.parse("from ..report import output\nfrom . import params\n"
                     "from ..analysis.training.step import step_time\n"
                     "from topomodel import __version__\n"
                     "from topomodel import fabric, errors\nimport topomodel.cli.parser\n")
    resolved = [_imported(path, node) for node in tree.body]
    assert resolved == [["topomodel.report.output"], ["topomodel.sweep.params"],
                        ["topomodel.analysis.training.step"], ["topomodel"],
                        ["topomodel.fabric", "topomodel.errors"], ["topomodel.cli.parser"]]
    init = PACKAGE / "fabric" / "__init__.py"
    (node,) = ast.parse("from .build import build_fabric").body
    assert _imported(init, node) == ["topomodel.fabric.build"]
    assert [_top(m) for m in ("topomodel", "topomodel.report.output", "numpy")] == \
        [None, "report", None]


def test_the_root_front_door_is_the_only_exempt_file():
    assert {PACKAGE / "__init__.py"} == {ROOT / name for name in EXEMPT}


def test_modules_are_at_most_600_lines():
    too_long = []
    for path in _sources():
        name = _relative(path)
        lines = path.read_bytes().count(b"\n")
        if lines > MAX_LINES and name not in LONG_MODULES:
            too_long.append(f"{name}: {lines} lines")
    assert not too_long, (f"modules over {MAX_LINES} lines (split them, or list them in "
                          f"LONG_MODULES with the reason 'one concept'):\n"
                          + "\n".join(too_long))


@pytest.mark.parametrize("name", sorted(LONG_MODULES))
def test_each_long_module_has_a_one_concept_reason(name):
    assert LONG_MODULES[name].startswith("one concept")


#: The most modules a folder may hold directly (its ``__init__.py`` aside): a larger one
#: is split into subpackages by family (``analysis/`` into collectives, training,
#: serving and reliability).
MAX_MODULES_PER_FOLDER = 16


def test_no_folder_holds_more_than_16_modules():
    crowded = {}
    for folder in {path.parent for path in _sources()}:
        modules = [p for p in folder.glob("*.py") if p.name != "__init__.py"]
        if len(modules) > MAX_MODULES_PER_FOLDER:
            crowded[_relative(folder)] = len(modules)
    assert not crowded, f"folders over {MAX_MODULES_PER_FOLDER} modules: {crowded}"


def _module_imports() -> dict[str, set[str]]:
    """Each package module and the package modules it imports anywhere (inside functions
    and under ``if TYPE_CHECKING:`` too), a package's own ``__init__`` aside."""
    graph: dict[str, set[str]] = {}
    for path in _sources():
        if _relative(path) in EXEMPT:
            continue
        me = _module_name(path)
        graph[me] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                graph[me] |= {m for m in _imported(path, node)
                              if _is_submodule(m) and m != me and not me.startswith(m + ".")}
    return graph


def test_no_import_cycles():
    import networkx as nx

    cycles = [sorted(c) for c in nx.strongly_connected_components(nx.DiGraph(
        [(a, b) for a, targets in _module_imports().items() for b in targets])) if len(c) > 1]
    assert not cycles, f"modules that import each other (a function-level import too): {cycles}"


def test_no_module_imports_another_modules_underscored_name():
    found = []
    for path in _sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("topomodel"):
                found += [f"{_relative(path)}:{node.lineno}: {node.module}.{a.name}"
                          for a in node.names
                          if a.name.startswith("_") and not a.name.startswith("__")]
    assert not found, "a name other modules import is public: " + "; ".join(found)

import subprocess
import sys

import pytest


def test_import_does_not_load_matplotlib():
    code = "import sys, topomodel, topomodel.inputs.catalog, topomodel.cli.design_verbs.draw; " \
           "print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_builtin_catalogs_are_found_from_any_directory(tmp_path):
    code = "from topomodel.inputs.catalog import load_catalog; print(len(load_catalog()) > 50)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=tmp_path)
    assert result.stdout.strip() == "True"


def test_every_public_name_resolves():
    import topomodel

    for name in topomodel.__all__:
        assert getattr(topomodel, name) is not None, name
    assert set(topomodel.__all__) <= set(dir(topomodel))


def test_dir_shows_only_the_public_names():
    import topomodel

    assert dir(topomodel) == sorted(topomodel.__all__)  # not importlib, Any, _HOMES


def test_public_names_are_the_lazy_ones_and_the_errors():
    import topomodel
    import topomodel.errors

    errors = {n for n, v in vars(topomodel.errors).items()
              if isinstance(v, type) and v.__module__ == "topomodel.errors"}
    assert set(topomodel.__all__) == set(topomodel._MODULE_OF) | errors | {"__version__"}
    assert topomodel.__all__ == sorted(topomodel.__all__)


def test_public_names_are_the_objects_of_their_home_modules():
    import importlib

    import topomodel

    for name, module in topomodel._MODULE_OF.items():
        assert getattr(topomodel, name) is getattr(importlib.import_module(module), name)


def test_import_loads_neither_numpy_nor_pandas_nor_matplotlib():
    code = "import sys, topomodel; " \
           "print(sorted(m for m in ('numpy', 'pandas', 'matplotlib') if m in sys.modules))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "[]"


def _loaded_after(argv: list[str], modules: tuple[str, ...]) -> list[str]:
    """Which of ``modules`` a fresh interpreter has loaded after ``topomodel argv``."""
    code = ("import sys, contextlib, io\n"
            "from topomodel.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            "    try:\n"
            f"        main({argv!r})\n"
            "    except SystemExit:\n"
            "        pass\n"
            f"print(' '.join(m for m in {modules!r} if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    return result.stdout.split()


@pytest.mark.parametrize("argv", [["--help"], ["step", "--help"], ["units", "1 GB"]])
def test_cli_start_up_loads_no_pandas_scipy_or_matplotlib(argv):
    """Start-up stays light (#17 item 7): the step model and its tables load when a verb
    runs, not to print help or convert a unit."""
    assert _loaded_after(argv, ("pandas", "matplotlib", "networkx", "topomodel.routing")) == []


@pytest.mark.parametrize("argv", [["--help"], ["step", "--help"], ["review", "--help"]])
def test_help_loads_no_numpy(argv):
    """Help is text: numpy (a tenth of a second to import) loads when a verb computes."""
    assert _loaded_after(argv, ("numpy",)) == []


@pytest.mark.parametrize("argv", [["units", "400 Gb/s", "--to", "GB/s"],
                                  ["units", "compare", "900 GB/s", "400 Gb/s"]])
def test_units_loads_no_numpy_or_catalog(argv):
    """``units`` converts with pint alone: no numpy (pint's import is kept from probing
    it), no scipy or dask, and no catalog (#17 item 7: under 0.3 s)."""
    assert _loaded_after(argv, ("numpy", "scipy", "dask", "topomodel.inputs.catalog")) == []


def test_help_loads_no_catalog_or_package_metadata():
    assert _loaded_after(["--help"], ("topomodel.inputs.catalog", "importlib.metadata")) == []


def test_version_flag_prints_the_package_version(capsys):
    from importlib.metadata import version

    from topomodel.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"topomodel {version('topomodel')}\n"


def test_version_is_the_package_metadata():
    from importlib.metadata import version

    import topomodel
    from topomodel import __version__

    assert topomodel.__version__ == __version__ == version("topomodel")


def test_unknown_attribute_raises_attribute_error():
    import topomodel

    with pytest.raises(AttributeError, match=r"module 'topomodel' has no attribute 'no_such"):
        topomodel.no_such_name  # noqa: B018
    assert not hasattr(topomodel, "build")


ROUTE_DESIGN = ("name: 512 B200\nsystem: hgx-b200\nsystems: 64\nscaleout:\n"
                "  kind: fat_tree\n  nic: connectx-8\n  switch: q3400\n")


@pytest.mark.parametrize("options", [
    [],  # auto: NVLS, NVLS-Tree, SHARP's plan and the ring and tree tried
    ["--algorithm", "innetwork", "--group", "rail", "--format", "table"],
    ["--fail", "spine0", "--scaleout-factor", "2", "--routing", "hash"],
])
def test_route_loads_no_pandas_scipy_or_matplotlib(tmp_path, options):
    """`route` reads the fabric's numpy columns (#42 item 1): its process imports no
    pandas (nor pyarrow), no scipy and no matplotlib where the structured router routes
    (flows it sends to the general router, around a failed domain, load scipy's graph
    search)."""
    design = tmp_path / "b512.yaml"
    design.write_text(ROUTE_DESIGN.replace("  kind:", "  in_network_reduction: true\n  kind:"))
    argv = ["route", str(design), "--collective", "allreduce", "--size", "1GiB", *options]
    assert _loaded_after(argv, ("pandas", "pyarrow", "scipy", "matplotlib")) == []

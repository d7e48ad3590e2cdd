import subprocess
import sys


def test_import_does_not_load_matplotlib():
    code = "import sys, topomodel, topomodel.catalog, topomodel.cli.commands; " \
           "print('matplotlib' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True)
    assert result.stdout.strip() == "False"


def test_builtin_catalogs_are_found_from_any_directory(tmp_path):
    code = "from topomodel.catalog import load_catalog; print(len(load_catalog()) > 50)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            check=True, cwd=tmp_path)
    assert result.stdout.strip() == "True"

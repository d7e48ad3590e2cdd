"""Files: inputs read safely (regular, bounded, named inside the naming file's tree),
outputs written atomically, symbolic links refused."""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from topomodel import files
from topomodel.cli import main
from topomodel.errors import UsageError
from topomodel.inputs.catalog import builtin_catalog_files

DESIGN = "examples/hgx-h100-server.yaml"


# Atomic writes ---------------------------------------------------------------------------


@pytest.fixture(params=["unnamed", "named"])
def writer(request, monkeypatch):
    """atomic_write through O_TMPFILE, and through the named temporary file used where
    there is none."""
    if request.param == "named":
        monkeypatch.setattr(files, "_unnamed_file", lambda folder: None)
    return files.atomic_write


@pytest.mark.parametrize("failure", [OSError, KeyboardInterrupt])
def test_a_write_failing_halfway_leaves_the_old_file_and_nothing_else(tmp_path, writer,
                                                                      failure):
    target = tmp_path / "out.json"
    target.write_bytes(b"old content")

    def half(stream):
        stream.write(b"new con")
        stream.flush()
        raise failure("disk full")

    with pytest.raises(failure):
        writer(target, half)
    assert target.read_bytes() == b"old content"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    writer(target, lambda stream: stream.write(b"new content"))
    assert target.read_bytes() == b"new content"
    assert [p.name for p in tmp_path.iterdir()] == ["out.json"]
    assert target.stat().st_mode & 0o777 == 0o666 & ~files.umask()


KILLED_WRITER = """\
import os, signal, sys
from topomodel.files import atomic_write
def write(stream):
    stream.write(b"x" * 100000)
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)
atomic_write(sys.argv[1], write)
"""


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="unnamed files are Linux's")
def test_a_write_killed_by_sigkill_leaves_no_temporary_file(tmp_path):
    target = tmp_path / "out" / "f.bin"
    target.parent.mkdir()
    target.write_bytes(b"old")
    run = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(target)], timeout=60,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.returncode == -signal.SIGKILL
    assert [p.name for p in target.parent.iterdir()] == ["f.bin"]
    assert target.read_bytes() == b"old"


def test_a_symlink_in_the_place_of_an_output_is_refused(tmp_path, capsys):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = tmp_path / "f.graphml"
    link.symlink_to(victim)
    with pytest.raises(UsageError, match="is a symbolic link"):
        files.atomic_bytes(link, b"x")
    assert main(["export", DESIGN, "--to", "graphml", "-o", str(link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a symbolic link" in err[0]
    assert link.is_symlink() and victim.read_text() == "precious\n"
    dangling = tmp_path / "gone.json"
    dangling.symlink_to(tmp_path / "nowhere")
    with pytest.raises(UsageError, match="is a symbolic link"):
        files.atomic_bytes(dangling, b"x")
    assert not (tmp_path / "nowhere").exists()


@pytest.mark.parametrize("argv", [
    ["export", DESIGN, "--to", "csv", "-o"],
    ["export", DESIGN, "--to", "parquet", "-o"],
    ["build", DESIGN, "--format", "csv", "-o"],
    ["review", DESIGN, "-o"]])
def test_a_folder_output_that_is_a_symlink_is_refused(tmp_path, capsys, argv):
    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp_path / "out"
    link.symlink_to(victim)
    assert main([*argv, str(link)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"topomodel: error: {link}: is a symbolic link; refusing to write"
                   " through it (give the real folder, or remove the link)"]
    assert link.is_symlink() and list(victim.iterdir()) == []


@pytest.mark.parametrize("argv", [
    ["export", DESIGN, "--to", "csv", "-o", "/sys"],
    ["build", DESIGN, "--format", "csv", "-o", "/proc/sys"],
    ["review", DESIGN, "-o", "/dev"],
    ["export", DESIGN, "--to", "json", "-o", "/sys/fabric.json"]])
def test_no_output_goes_into_a_system_folder(capsys, argv):
    # /sys, /proc and /dev hold nothing a write could harm, and refuse it anyway
    assert main(argv) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is a system folder" in err[0], err


def test_the_system_folders_are_the_documented_ones(tmp_path):
    for folder in ["/", "/etc", "/usr/local/bin", "/var", "/boot/efi", "/home", "/proc/1"]:
        assert files.system_folder(folder) is not None, folder
    for folder in [tmp_path, "/var/tmp/x", "/home/someone/out", "/tmp", "/usrx"]:
        assert files.system_folder(folder) is None, folder
    link = tmp_path / "etc"
    link.symlink_to("/etc")  # links resolved: a link to a system folder is one
    assert files.system_folder(link / "sub") == "/etc"
    with pytest.raises(UsageError, match=r"is a system folder \(/etc\)"):
        files.atomic_bytes(link / "sub" / "f.json", b"x")


def test_a_sweep_files_design_stays_in_its_tree(tmp_path, capsys):
    (tmp_path / "secret.yaml").write_text("password: hunter2\n")
    folder = tmp_path / "work"
    folder.mkdir()
    sweep = folder / "s.yaml"
    for design in ["../secret.yaml", str(tmp_path / "secret.yaml"), "/etc/hostname"]:
        sweep.write_text(f"design: {design}\nfixed: {{model: llama3-8b}}\n")
        assert main(["sweep", str(sweep), "--dry-run"]) == 2
        (line,) = capsys.readouterr().err.strip().splitlines()
        assert f"{sweep}:1: design: {design} is outside" in line and "hunter2" not in line
    # a sweeps/ folder beside its designs (as examples/sweeps/), and --catalog-dir
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "d.yaml").write_text(Path(DESIGN).read_text())
    beside = tmp_path / "sweeps" / "s.yaml"
    beside.write_text("design: ../d.yaml\nfixed: {model: llama3-8b}\n")
    assert main(["sweep", str(beside), "--dry-run"]) == 0
    sweep.write_text("design: ../d.yaml\nfixed: {model: llama3-8b}\n")
    assert main(["sweep", str(sweep), "--dry-run", "--catalog-dir", str(tmp_path)]) == 0


# Reading inputs --------------------------------------------------------------------------


def test_only_bounded_regular_files_are_read(tmp_path):
    for path, reason in (("/dev/zero", "not a regular file"),
                         (str(tmp_path), "not a regular file (a folder)")):
        with pytest.raises(OSError) as caught:
            files.read_input_text(path)
        assert reason in caught.value.strerror
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    start = time.monotonic()
    with pytest.raises(OSError, match="not a regular file"):
        files.read_input_text(fifo)  # no writer: opening it must not wait for one
    assert time.monotonic() - start < 5
    big = tmp_path / "big.yaml"
    big.write_bytes(b"#" * 1001)
    with pytest.raises(OSError, match="larger than the 1,000 bytes"):
        files.read_input_text(big, limit_bytes=1000)
    assert files.read_input_text(big, limit_bytes=1001) == "#" * 1001


def _design_naming(tmp_path, catalog):
    folder = tmp_path / "designs"
    folder.mkdir(exist_ok=True)
    design = folder / "d.yaml"
    text = Path(DESIGN).read_text()
    design.write_text(f"catalogs: [{catalog!r}]\n" + text)
    return design


@pytest.mark.parametrize("catalog", ["/etc/shadow", "/etc/passwd", "/dev/zero",
                                     "/dev/stdin", "../secret.yaml"])
def test_a_catalog_outside_the_designs_tree_is_one_line_fast(tmp_path, catalog):
    (tmp_path / "secret.yaml").write_text("password: hunter2\n")
    design = _design_naming(tmp_path, catalog)
    start = time.monotonic()
    with subprocess.Popen([sys.executable, "-m", "topomodel", "build", str(design)],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True,
                          env={**os.environ, "PYTHONPATH": os.getcwd()}) as run:
        out, err = run.communicate(timeout=60)  # stdin stays open while it runs
    assert time.monotonic() - start < 30
    assert run.returncode == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "is outside" in lines[0] and "--catalog-dir" in lines[0]
    assert lines[0].startswith(f"topomodel: error: {design}:1: catalogs[0]: ")
    assert "root:" not in lines[0] and "hunter2" not in lines[0]


def test_allowed_folders_and_builtin_catalogs(tmp_path, capsys):
    (tmp_path / "secret.yaml").write_text("password: hunter2\n")
    design = _design_naming(tmp_path, "../secret.yaml")
    assert main(["build", str(design), "--catalog-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()  # read now, but it is no catalog
    assert len(err) == 1 and "not a catalog file" in err[0] and "hunter2" not in err[0]
    assert "password" not in err[0]
    assert main(["build", str(_design_naming(tmp_path, str(builtin_catalog_files()[0])))
                 ]) == 0
    capsys.readouterr()
    (tmp_path / "designs" / "sub").mkdir()
    (tmp_path / "designs" / "sub" / "empty.yaml").write_text("switches: {}\n")
    assert main(["build", str(_design_naming(tmp_path, "sub/empty.yaml"))]) == 0
    capsys.readouterr()
    outside = tmp_path / "designs" / "sub" / "link.yaml"
    outside.symlink_to(tmp_path / "secret.yaml")  # a link out of the tree is outside
    assert main(["build", str(_design_naming(tmp_path, "sub/link.yaml"))]) == 2
    assert "is outside" in capsys.readouterr().err


def test_a_sweep_files_catalogs_stay_in_its_tree(tmp_path, capsys):
    (tmp_path / "secret.yaml").write_text("password: hunter2\n")
    folder = tmp_path / "sweeps"
    folder.mkdir()
    (folder / "d.yaml").write_text(Path(DESIGN).read_text())
    sweep = folder / "s.yaml"
    sweep.write_text("design: d.yaml\ncatalogs: [/dev/zero, ../secret.yaml]\n"
                     "fixed: {model: megatron-gpt-1t}\n")
    assert main(["sweep", str(sweep), "--dry-run"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all("is outside" in line for line in err)
    assert "catalogs[0]" in err[0] and "catalogs[1]" in err[1]


def test_plan_takes_catalog_dirs_as_the_other_verbs_do(tmp_path, capsys):
    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "extra.yaml").write_text("switches: {}\n")
    design = _design_naming(tmp_path, "../cats/extra.yaml")
    # a tiny search space (one TP and PP, one micro-batch size, no interleave or CP): the
    # flag is what is tested, not the search
    plan = ["plan", str(design), "--model", "llama3-8b", "--no-progress", "--format", "json",
            "--fixed", "tp=8", "--fixed", "pp=1", "--max-cp", "1", "--max-micro-batch", "1",
            "--max-interleave", "1"]
    assert main(plan) == 2
    assert "--catalog-dir" in capsys.readouterr().err
    assert main([*plan, "--catalog-dir", str(tmp_path / "cats")]) == 0
    assert '"schema": "topomodel.plan"' in capsys.readouterr().out



@pytest.mark.parametrize("verb", [
    ["decode", "--model", "llama3-8b", "--tp", "8"],
    ["check-nccl", "tests/data/nccl/rtx4090-4gpu-allreduce.log"]])
def test_decode_and_check_nccl_take_catalog_dirs(tmp_path, capsys, verb):
    (tmp_path / "cats").mkdir()
    (tmp_path / "cats" / "extra.yaml").write_text("switches: {}\n")
    design = _design_naming(tmp_path, "../cats/extra.yaml")
    argv = ([verb[0], str(design), *verb[1:]] if verb[0] == "decode"
            else [*verb, "--design", str(design)]) + ["--format", "json"]
    assert main(argv) == 2
    assert "--catalog-dir" in capsys.readouterr().err
    assert main([*argv, "--catalog-dir", str(tmp_path / "cats")]) == 0
    capsys.readouterr()

def _full_disk(stream):
    stream.write(b"half")
    raise OSError(28, "No space left on device")  # as a write to a full disk raises


def test_several_files_are_written_all_or_none(tmp_path):
    target = tmp_path / "new" / "sub"
    with pytest.raises(OSError) as failed:
        files.atomic_files(target, [("a.csv", lambda s: s.write(b"a")),
                                    ("b.csv", _full_disk)])
    assert failed.value.filename == str(target / "b.csv")  # the message can name it
    assert not (tmp_path / "new").exists()  # the folders made for them went too
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "a.csv").write_text("old")
    with pytest.raises(OSError):
        files.atomic_files(kept, [("a.csv", lambda s: s.write(b"new")),
                                  ("b.csv", _full_disk)])
    assert [p.name for p in kept.iterdir()] == ["a.csv"] and (kept / "a.csv").read_text() == "old"
    written = files.atomic_files(kept, [("a.csv", lambda s: s.write(b"new")),
                                        ("b.csv", lambda s: s.write(b"b"))])
    assert [p.read_text() for p in written] == ["new", "b"]


def test_a_failed_command_makes_no_folder_and_a_file_is_no_folder(tmp_path, capsys):
    out = tmp_path / "newdir" / "p.csv"
    assert main(["plan", DESIGN, "--model", "nope", "-o", str(out)]) == 2
    assert "unknown model id 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "newdir").exists()
    (tmp_path / "f").write_text("")
    assert main(["draw", DESIGN, "-o", str(tmp_path / "f" / "out.png")]) == 2
    assert "cannot write: Not a directory" in capsys.readouterr().err


def test_a_missing_catalog_is_named_at_its_key(tmp_path, capsys):
    design = _design_naming(tmp_path, "nosuch.yaml")
    assert main(["build", str(design)]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"topomodel: error: {design}:1: catalogs[0]: nosuch.yaml: no such")


def test_a_sweep_refused_at_the_start_says_nothing_else(tmp_path, capsys):
    sweep = tmp_path / "s.yaml"
    (tmp_path / "d.yaml").write_text(Path(DESIGN).read_text())
    sweep.write_text("name: t\ndesign: d.yaml\nfixed: {model: llama3-8b}\n"
                     "parameters:\n  tp: [4, 8]\n")
    assert main(["sweep", str(sweep), "-o", str(tmp_path / "r.csv"), "--resume",
                 "--overwrite"]) == 2
    (line,) = capsys.readouterr().err.strip().splitlines()  # no point count before it
    assert "pick one" in line


KILLED_FOLDER_WRITER = """\
import os, signal, sys
from topomodel.files import atomic_files
def write(stream):
    stream.write(b"x" * 100000)
    stream.flush()
    os.kill(os.getpid(), signal.SIGKILL)
atomic_files(sys.argv[1], [("a.csv", lambda stream: stream.write(b"a")), ("b.csv", write)])
"""


def test_a_folder_write_killed_by_sigkill_leaves_no_folder(tmp_path):
    """``export --to csv -o DIR`` killed while it writes: the folder is made only once
    every file is written, so there is no empty DIR (nor a missing folder above it)."""
    target = tmp_path / "new" / "tables"
    run = subprocess.run([sys.executable, "-c", KILLED_FOLDER_WRITER, str(target)],
                         timeout=60, env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert run.returncode == -signal.SIGKILL
    leftovers = list(tmp_path.iterdir())
    assert leftovers == [] or not hasattr(os, "O_TMPFILE"), leftovers
    assert not (tmp_path / "new").exists()

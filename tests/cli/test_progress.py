"""Long verbs show staged progress on a terminal's stderr, quiet in pipes and with
``--no-progress``; ``compare`` and ``review`` leave out the goodput with ``--no-goodput``
(#36 item 6)."""

import json
import sys

import pytest

from topomodel.cli import main
from topomodel.cli.shared import Stages

DESIGN = "system: toy-box\nsystems: 8\nscaleout:\n  switch: toy-switch-8\n"
JOB = ["--model", "toy-dense", "--tp", "4", "--pp", "2"]


@pytest.fixture
def job(toy):
    toy(DESIGN)
    return str(toy.tmp_path / "design.yaml"), ["--catalog", str(toy.catalog_path)]


def _argv(verb, design, catalog, tmp_path):
    return {"compare": ["compare", design, design, *JOB, "--workers", "1"],
            "review": ["review", design, *JOB, "-o", str(tmp_path / "r"), "--workers", "1"],
            "goodput": ["goodput", design, *JOB, "--workers", "1"],
            "route": ["route", design, "--collective", "allreduce", "--size", "1 MiB"],
            }[verb] + catalog


def test_stages_print_their_start_and_seconds_when_shown(capsys):
    with Stages("compare", show=True)("a.yaml: step"):
        pass
    err = capsys.readouterr().err.splitlines()
    assert err[0] == "compare: a.yaml: step ..."
    assert err[1].startswith("compare: a.yaml: step: done in ") and err[1].endswith(" s")
    with Stages("compare", show=False)("a.yaml: step"):
        pass
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("verb", ["compare", "review", "goodput", "route"])
def test_long_verbs_show_stages_on_a_terminal_only(verb, job, capsys, tmp_path,
                                                    monkeypatch):
    design, catalog = job
    argv = _argv(verb, design, catalog, tmp_path)
    assert main(argv) == 0  # stderr is captured: not a terminal, so quiet
    assert f"{verb}: " not in capsys.readouterr().err
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    assert main(argv) == 0
    err = capsys.readouterr().err
    assert f"{verb}: " in err and "done in" in err
    assert main([*argv, "--no-progress"]) == 0
    assert f"{verb}: " not in capsys.readouterr().err


def test_plan_takes_no_progress(job, capsys):
    design, catalog = job
    assert main(["plan", design, "--model", "toy-dense", "--no-progress", "--top", "1",
                 *catalog]) == 0
    assert capsys.readouterr().err == ""


def test_compare_and_review_leave_out_the_goodput(job, capsys, tmp_path):
    design, catalog = job
    assert main(["compare", design, design, *JOB, *catalog, "--no-goodput",
                 "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert all(d["goodput"] is None for d in data["designs"])
    assert main(["compare", design, design, *JOB, *catalog, "--no-goodput"]) == 0
    out = capsys.readouterr().out
    assert "MFU" in out and "effective training time" not in out and "goodput" not in out
    assert main(["review", design, *JOB, *catalog, "--no-goodput", "-o",
                 str(tmp_path / "r")]) == 0
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    assert report["goodput"] is None and report["step"]["mfu"] > 0

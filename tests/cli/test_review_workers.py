"""``review``'s worker processes: every piece in the CLI's process unless ``--workers``
asks for more (the same report either way: tests/edge/test_parallel.py)."""

from __future__ import annotations

import pytest

import topomodel.report.review as review_package
from topomodel.cli import main
from topomodel.cli.job_verbs.review import REVIEW_WORKERS

SMALL = "examples/small-16x8-a100-100gbe-roce.yaml"


class _Stop(Exception):
    pass


@pytest.mark.parametrize(("flags", "expected"), [((), REVIEW_WORKERS),
                                                 (("--workers", "2"), 2)])
def test_review_runs_its_pieces_here_unless_workers_asks_for_more(
        monkeypatch, tmp_path, flags, expected):
    asked: list[int | None] = []

    def collect(fabric, **options):
        asked.append(options["workers"])
        raise _Stop  # the worker count is all this test reads

    monkeypatch.setattr(review_package, "collect_review", collect)
    with pytest.raises(_Stop):
        main(["review", SMALL, "-o", str(tmp_path / "r"), *flags])
    assert asked == [expected]
    assert REVIEW_WORKERS == 1

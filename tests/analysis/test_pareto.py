"""Pareto fronts against a brute-force dominance check, objectives, and the plot."""

import numpy as np
import pytest

from topomodel.analysis.pareto import Objective, pareto_mask, parse_objective
from topomodel.draw.charts import plot_front
from topomodel.errors import UsageError


def brute_force(values, maximize):
    """Front by definition: no other point at least as good everywhere, better somewhere."""
    cost = np.where(maximize, -values, values)
    out = []
    for p in cost:
        if np.isnan(p).any():
            out.append(False)
            continue
        others = cost[~np.isnan(cost).any(axis=1)]
        dominated = np.any(np.all(others <= p, axis=1) & np.any(others < p, axis=1))
        out.append(not dominated)
    return np.array(out)


@pytest.mark.parametrize("objectives", [2, 3])
@pytest.mark.parametrize("seed", range(6))
def test_front_matches_brute_force_on_random_points(objectives, seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 300))
    # a small integer grid makes ties and duplicates common
    values = rng.integers(0, 12, size=(n, objectives)).astype(float)
    values[rng.random(n) < 0.05, 0] = np.nan
    maximize = rng.random(objectives) < 0.5
    mask = pareto_mask(values, maximize)
    assert (mask == brute_force(values, maximize)).all()
    usable = ~np.isnan(values).any(axis=1)
    assert mask.any() == usable.any()


def test_front_keeps_duplicates_and_drops_nan():
    values = np.array([[1, 1], [1, 1], [2, 0], [0, 2], [2, 2], [np.nan, 0]], dtype=float)
    assert pareto_mask(values, [False, False]).tolist() == [True, True, True, True, False,
                                                            False]
    assert pareto_mask(values, [True, True]).tolist() == [False, False, False, False, True,
                                                          False]
    assert not pareto_mask(np.empty((0, 2)), [False, False]).any()
    with pytest.raises(ValueError, match="one direction per objective"):
        pareto_mask(values, [False])


def test_objectives_take_their_direction_from_the_metric_or_the_text():
    known = {"mfu": "max", "power_W": "min", "tp": None}
    assert parse_objective("mfu", known) == Objective("mfu", "max")
    assert parse_objective("mfu:min", known) == Objective("mfu", "min")
    assert parse_objective("+power_W", known) == Objective("power_W", "max")
    assert parse_objective("-mfu", known) == Objective("mfu", "min")
    with pytest.raises(UsageError, match="tp has no natural direction"):
        parse_objective("tp", known)
    with pytest.raises(UsageError, match="did you mean 'mfu'"):
        parse_objective("mfuu", known)
    with pytest.raises(UsageError, match="'min' or 'max'"):
        parse_objective("mfu:up", known)


@pytest.mark.parametrize("suffix", [".png", ".svg", ".pdf"])
def test_plot_front_writes_the_file(tmp_path, suffix):
    rng = np.random.default_rng(0)
    x, y = rng.random(40) * 1e6, rng.random(40)
    mask = pareto_mask(np.c_[x, y], [False, False])
    path = tmp_path / f"front{suffix}"
    plot_front(x, y, mask, str(path), title="t",
               objectives=(Objective("power_W", "min"), Objective("step_time_s", "min")),
               excluded=(x[:3], y[:3]))
    head = path.read_bytes()[:8]
    expected = {".png": b"\x89PNG", ".svg": b"<?xml", ".pdf": b"%PDF-"}[suffix]
    assert head.startswith(expected)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary file left

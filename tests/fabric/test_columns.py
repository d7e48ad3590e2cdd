"""Categorical columns read as codes: ``group_totals`` against a pandas group-by."""

import numpy as np
import pandas as pd
import pytest

from topomodel.fabric.columns import group_totals
from topomodel.fabric.tables import categorical


def _table(seed: int, rows: int = 5000) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({
        "tier": categorical(rng.integers(0, 3, rows), ["spine", "leaf", "core", "unused"]),
        "length_m": rng.choice([50.0, 2.0, 0.0, 30.0, 2.5], rows),
        "lanes": rng.choice([4, 1, 8], rows),
        "cables": rng.integers(0, 5, rows),
    })


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("every_row", [True, False])
def test_group_totals_is_the_sorted_group_by(seed, every_row):
    """Totals, keys and their order (category codes, then ascending values) are the
    group-by's, over a mask of rows or over every row; a group of zero total is kept."""
    table = _table(seed)
    mask = None if every_row else (np.arange(len(table)) % 3 != 0)
    keys = ["tier", "length_m", "lanes"]
    chosen = table if mask is None else table[mask]
    expected = chosen.groupby(keys, observed=True, sort=True)["cables"].sum()
    totals = group_totals([table[k] for k in keys], table["cables"].to_numpy(), mask)
    assert list(totals.items()) == [(key, int(n)) for key, n in expected.items()]
    assert any(n == 0 for n in group_totals([table["tier"], table["length_m"]],
                                            np.zeros(len(table), np.int64), mask).values())


def test_group_totals_refuses_a_missing_key():
    table = _table(3, rows=10)
    lengths = table["length_m"].copy()
    lengths.iloc[4] = np.nan
    with pytest.raises(ValueError, match="missing values"):
        group_totals([table["tier"], lengths], table["cables"].to_numpy(), None)
    tiers = table["tier"].copy()
    tiers.iloc[2] = np.nan
    with pytest.raises(ValueError, match="missing values"):
        group_totals([tiers], table["cables"].to_numpy(), None)


def test_fabric_tables_as_frames_are_the_columns(example_fabric):
    """``Fabric.nodes``/``links`` are the numpy columns as pandas DataFrames (categorical
    columns as pandas categoricals), and back again unchanged."""
    from topomodel.fabric.columns import Category, Columns
    from topomodel.fabric.tables import LINK_COLUMNS, NODE_COLUMNS

    fabric = example_fabric("dgx-h100-superpod")
    for arrays, frame, names in ((fabric.node_arrays, fabric.nodes, NODE_COLUMNS),
                                 (fabric.link_arrays, fabric.links, LINK_COLUMNS)):
        assert tuple(frame.columns) == arrays.names == names
        back = Columns.of_frame(frame)
        for name in names:
            column = arrays[name]
            if isinstance(column, Category):
                assert frame[name].dtype.name == "category"
                assert frame[name].tolist() == column.tolist() == back[name].tolist()
                assert (column == column.categories[0]).tolist() == (
                    frame[name] == column.categories[0]).tolist()
            else:
                assert np.array_equal(frame[name].to_numpy(), column)
                assert np.array_equal(back[name], column)
    with pytest.raises(ValueError, match="read-only"):
        fabric.link_arrays["capacity_Bps"][0] = 1.0  # shared by copies: never written

"""Prices of parts: every built-in part priced with provenance, overlays, errors."""

import textwrap

import pytest

from topomodel.errors import CatalogError
from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.parts import PROVENANCES, Fibre, Part


@pytest.fixture(scope="module")
def catalog():
    return load_catalog()


def write(tmp_path, text):
    path = tmp_path / "prices.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_every_builtin_part_and_fibre_has_a_sourced_dated_price(catalog):
    for entry in catalog.entries.values():
        if not isinstance(entry, Part | Fibre):
            continue
        price = catalog.price_of(entry.id)
        assert price is not None, entry.id
        assert price.source.strip() and price.date and price.provenance in PROVENANCES
        if price.provenance == "assumed":  # an assumption states its range and reason
            assert price.range_USD is not None and price.notes.strip(), entry.id
        assert price.low_USD <= price.price_USD <= price.high_USD


def test_an_overlay_replaces_a_builtin_price(tmp_path):
    path = write(tmp_path, """
        prices:
          qm9700: {price: "50000 USD", date: "2025-01", source: a quote, provenance: secondary}
        """)
    price = load_catalog([path]).price_of("qm9700")
    assert price.price_USD == 50000 and price.range_USD is None
    assert price.low_USD == price.high_USD == 50000


@pytest.mark.parametrize(("text", "message"), [
    ('qm9700: {price: "1 USD", date: "2025", source: s, provenance: assumed}',
     r"prices\.qm9700\.range: an assumed price needs a range"),
    ('qm9700: {price: "9 USD", range: ["1 USD", "2 USD"], date: "2025", source: s,'
     ' provenance: secondary}', r"prices\.qm9700\.range: the price is outside its range"),
    ('qm9700: {price: "1 USD", range: ["3 USD", "2 USD"], date: "2025", source: s,'
     ' provenance: secondary}', r"prices\.qm9700\.range: low is above high"),
    ('qm9700: {price: "1 USD", date: "May 2025", source: s, provenance: secondary}',
     r"prices\.qm9700\.date: expected a year or year-month"),
    ('qm9701: {price: "1 USD", date: "2025", source: s, provenance: secondary}',
     r"prices\.qm9701: unknown part id 'qm9701'; did you mean 'qm9700'"),
    ('nvlink4: {price: "1 USD", date: "2025", source: s, provenance: secondary}',
     r"prices\.nvlink4: a scaleup_link, not a part: 'nvlink4'"),
    ('qm9700: {price: "1 GB", date: "2025", source: s, provenance: secondary}',
     r"prices\.qm9700\.price:"),
])
def test_bad_prices_name_file_line_and_key(tmp_path, text, message):
    path = write(tmp_path, "prices:\n  " + text + "\n")
    with pytest.raises(CatalogError, match=message) as info:
        load_catalog([path])
    assert f"{path}:2" in str(info.value)


def test_a_price_in_a_part_entry_is_refused(tmp_path):
    path = write(tmp_path, """
        switches:
          my-switch:
            protocol: ethernet
            ports: 8
            port_rate: "100 Gb/s /dir"
            price: "5000 USD"
            source: s
            provenance: assumed
        """)
    with pytest.raises(CatalogError, match=r"switches\.my-switch\.price: unknown key"):
        load_catalog([path])


def test_catalog_show_prints_the_price_with_its_range_and_date(capsys):
    import json

    from topomodel.cli import main

    assert main(["catalog", "show", "qm9700", "--format", "json"]) == 0
    price = json.loads(capsys.readouterr().out)["price"]
    assert price["price_USD"] == 36000 and price["high_USD"] == 50000
    assert price["date"] == "2024-08" and price["provenance"] == "secondary"

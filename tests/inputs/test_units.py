import pytest

from topomodel.errors import UnitError
from topomodel.inputs.units import (
    compare,
    convert,
    format_rate,
    format_si,
    parse,
    parse_bandwidth,
)


@pytest.mark.parametrize(
    ("text", "kind", "expected"),
    [
        ("400 Gb/s", "rate", 50e9),
        ("400 Gbps", "rate", 50e9),
        ("900 GB/s", "rate", 900e9),
        ("900 GBps", "rate", 900e9),
        ("1.6 Tb/s", "rate", 200e9),
        ("1 GiB/s", "rate", 2**30),
        ("64 MiB", "size", 64 * 2**20),
        ("80 GB", "size", 80e9),
        ("8 b", "size", 1.0),
        ("2 us", "time", 2e-6),
        ("2 µs", "time", 2e-6),
        ("1.5 ms", "time", 1.5e-3),
        ("17 W", "power", 17.0),
        ("22.5 pJ/bit", "energy_per_bit", 22.5),
        ("500 m", "length", 500.0),
        ("2 km", "length", 2000.0),
        ("3 dB", "loss", 3.0),
        ("0.4 dB/km", "loss_per_length", 0.4),
        ("-2.2 dBm", "optical_power", -2.2),
        ("989.4 TFLOP/s", "compute_rate", 989.4e12),
        ("32 GT/s", "transfer_rate", 32e9),
    ],
)
def test_parse_to_canonical_units(text, kind, expected):
    assert parse(text, kind) == pytest.approx(expected)


def test_byte_is_eight_bits_and_binary_prefixes_differ():
    assert parse("1 GB", "size") == 1e9
    assert parse("1 GiB", "size") == 2**30
    assert parse("1 Gb", "size") == 1e9 / 8


@pytest.mark.parametrize(
    ("text", "kind", "message"),
    [
        ("900 GB", "rate", "is a size, not a rate"),
        ("400 Gb/s", "size", "is a rate, not a size"),
        ("16 GT/s", "rate", "transfer \\(signalling\\) rate, not a bandwidth"),
        ("3 GHz", "rate", "is a frequency, not a bandwidth"),
        ("25 GBd", "rate", "symbol rate"),
        ("400", "rate", "has no unit"),
        ("400 Gbit/z", "rate", "unknown unit|cannot be read"),
        ("", "rate", "empty"),
        ("0 GB/s", "rate", "greater than zero"),
        ("-1 GB", "size", "greater than zero"),
        ("-2 us", "time", "cannot be negative"),
        ("lots", "size", "starts with a number"),
        ("m", "length", "starts with a number"),
    ],
)
def test_parse_refuses_wrong_quantities(text, kind, message):
    with pytest.raises(UnitError, match=message):
        parse(text, kind)


@pytest.mark.parametrize("value", [400, 4.5, None, True, ["400 Gb/s"]])
def test_bare_values_are_refused(value):
    with pytest.raises(UnitError, match="bare number"):
        parse(value, "rate")


def test_bandwidth_direction_is_resolved_to_per_direction():
    assert parse_bandwidth("900 GB/s bidir").per_direction_Bps == 450e9
    assert parse_bandwidth("900 GB/s bidirectional").stated == "bidir"
    assert parse_bandwidth("450 GB/s /dir").per_direction_Bps == 450e9
    assert parse_bandwidth("450 GB/s per direction").bidir_Bps == 900e9


def test_bandwidth_without_direction_is_refused():
    with pytest.raises(UnitError, match="must say its direction"):
        parse_bandwidth("400 Gb/s")
    with pytest.raises(UnitError, match="is a size"):
        parse_bandwidth("400 GB")


def test_convert_and_compare():
    assert convert("900 GB/s", "Gb/s") == (7200.0, "Gb/s")
    assert compare("900 GB/s", "400 Gb/s").ratio == pytest.approx(18)
    same = compare("900 GB/s bidir", "800 Gb/s bidir")
    assert same.warning is None
    mixed = compare("900 GB/s bidir", "400 Gb/s /dir")
    assert mixed.ratio_per_direction == pytest.approx(9)
    assert "bidirectional total" in mixed.warning
    with pytest.raises(UnitError, match="cannot be compared"):
        compare("900 GB/s", "900 GB")


def test_format_rate_shows_both_conventions():
    assert format_rate(50e9) == "50 GB/s (400 Gb/s)"


def test_pint_for_scalars_only_gives_the_same_numbers_and_leaves_numpy_importable():
    """The command line imports pint without numpy, scipy and dask (start-up, #17 item
    7): every kind parses to the same float as with pint as installed, pint loaded
    none of them, and numpy still imports afterwards."""
    import json
    import subprocess
    import sys

    from topomodel.inputs.units import KINDS

    texts = [(k.example, k.name) for k in KINDS.values()] + [
        ("900 GB/s", "rate"), ("64 MiB", "size"), ("-2.2 dBm", "optical_power"),
        ("500 FIT", "failure_rate")]
    code = ("import json, sys\n"
            "from topomodel.inputs.units import parse, pint_for_scalars_only\n"
            "pint_for_scalars_only()\n"
            f"values = [parse(t, k) for t, k in {texts!r}]\n"
            "loaded = [m for m in ('numpy', 'scipy', 'dask') if m in sys.modules]\n"
            "import numpy\n"
            "print(json.dumps([values, loaded, float(numpy.float64(2))]))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    values, loaded, two = json.loads(out)
    assert values == [parse(t, k) for t, k in texts]
    assert loaded == [] and two == 2.0


def test_parse_by_unit_factor_equals_pint_bit_for_bit():
    """:func:`parse` reads a unit once and multiplies (one pint parse per unit, not per
    figure): every figure of the catalogs and examples gives pint's own float."""
    import re
    from pathlib import Path

    import yaml

    from topomodel.inputs.units import (
        _QUANTITY,
        KINDS,
        _read_canonical,
        _unit_factor,
        split_direction,
    )

    root = Path(__file__).resolve().parents[2]
    texts: set[str] = set()

    def walk(value):
        if isinstance(value, dict):
            for v in value.values():
                walk(v)
        elif isinstance(value, list):
            for v in value:
                walk(v)
        elif isinstance(value, str) and re.match(r"^[+-]?(\d|\.\d)", value.strip()):
            texts.add(split_direction(value)[0])

    for path in [*root.glob("catalogs/**/*.yaml"), *root.glob("examples/**/*.yaml")]:
        walk(yaml.safe_load(path.read_text()))
    texts |= {"1.5e3 GB/s", "0.1 /yr", "2 %/yr", "500 FIT", "-2.2 dBm", "7 1/s"}
    compared = 0
    for text in sorted(texts):
        for kind in KINDS:
            try:
                expected = _read_canonical(text, kind)
            except UnitError:
                continue
            written = _QUANTITY.match(text.strip())
            factor = _unit_factor(written["unit"].strip(), kind)
            assert factor is not None, (text, kind)
            assert float(written["number"]) * factor == expected, (text, kind)
            compared += 1
    assert compared > 250


def test_a_residue_of_the_whole_prints_as_zero():
    # a residue of 1.78e-15 s in a 187 s step printed as "0.001776 ps"
    assert format_si(1.776e-15, "s") == "0.001776 ps"
    assert format_si(1.776e-15, "s", of=186.9) == "0 s"
    assert format_si(1e-9, "s", of=186.9) == "1 ns"  # a real part, however small, stays

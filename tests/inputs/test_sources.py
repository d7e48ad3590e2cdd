"""The bibliography ships inside the package and resolves every source tag (#15 item 8)."""

from pathlib import Path

from topomodel.inputs.catalog import load_catalog
from topomodel.inputs.sources import TAG, bibliography, citations, cited_tags

ROOT = Path(__file__).resolve().parents[2]


def test_every_tag_in_catalogs_examples_and_package_resolves():
    files = [*(ROOT / "catalogs").glob("*.yaml"), *(ROOT / "examples").rglob("*.yaml"),
             *(ROOT / "topomodel").rglob("*.py")]
    tags = {tag for path in files for tag in TAG.findall(path.read_text())}
    assert len(tags) > 50
    _, missing = citations(sorted(tags))
    assert missing == []


def test_citations_are_text_with_their_dates():
    known = bibliography()
    assert known["S27"].text.startswith("Llama Team, Meta, \"The Llama 3 Herd of Models\"")
    assert known["R2"].date == "2024-05-06" and known["R2"].kind.startswith("forum post")
    assert all(c.text.strip() and c.tag == tag for tag, c in known.items())
    found, missing = citations(["S1", "S999", "S1"])
    assert [c.tag for c in found] == ["S1"] and missing == ["S999"]


def test_the_bibliography_is_inside_the_package():
    import topomodel.inputs

    assert (Path(topomodel.inputs.__file__).parent / "sources.yaml").is_file()
    every_source = " ".join(e.source + " " + e.notes for e in load_catalog().entries.values())
    assert set(cited_tags(every_source)) <= set(bibliography())

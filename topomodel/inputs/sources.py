"""The bibliography: what each source tag (``[S27]``, ``[R46]``) in a catalog entry, an
example design or the package's own text stands for.

The citations ship inside the package (``topomodel/inputs/sources.yaml``), so a review can
print every tag it shows with its full text, date and kind, without any file outside
the package.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from importlib import resources

TAG = re.compile(r"\[([SR]\d+[a-z]?)\]")
"""A source tag as the catalogs write it: ``[S27]``, ``[S23b]``, ``[R46]``."""


@dataclass(frozen=True)
class Citation:
    """One source: its tag, the citation a reader can follow, and (where the source
    gives them) its date and kind (paper, vendor doc, secondary, ...)."""

    tag: str
    text: str
    date: str = ""
    kind: str = ""


@cache
def bibliography() -> dict[str, Citation]:
    """Every citation by tag, from the package's ``sources.yaml``.

    Examples
    --------
    >>> bibliography()["S27"].text.startswith("Llama Team, Meta")
    True
    """
    import yaml

    text = (resources.files("topomodel.inputs") / "sources.yaml").read_text(encoding="utf-8")
    # libyaml's loader where PyYAML has it: a tenth of the pure-Python one's time
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return {str(tag): Citation(str(tag), str(item["text"]), str(item.get("date", "")),
                               str(item.get("kind", ""))) for tag, item in data.items()}


def cited_tags(text: str) -> list[str]:
    """The source tags in ``text``, in order, each once.

    Examples
    --------
    >>> cited_tags("NVIDIA DGX SuperPOD RA [S1]; Lockwood [S11], again [S1]")
    ['S1', 'S11']
    """
    return list(dict.fromkeys(TAG.findall(text)))


def citations(tags: Iterable[str]) -> tuple[list[Citation], list[str]]:
    """The citations of ``tags`` (in order, each once), and the tags without one."""
    known = bibliography()
    found, missing = [], []
    for tag in dict.fromkeys(tags):
        if tag in known:
            found.append(known[tag])
        else:
            missing.append(tag)
    return found, missing

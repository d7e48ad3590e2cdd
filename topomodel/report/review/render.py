"""Render a :class:`~topomodel.report.review.document.Review` as HTML, Markdown and JSON,
and write the report directory atomically.

``report.html`` is one self-contained file: the stylesheet is inline, the figures are
PNG ``data:`` URIs, and nothing is fetched from anywhere, so it opens offline and can be
mailed around. ``report.md`` links its figures as files (``figures/*.png``) next to it.
``report.json`` is ``schema: topomodel.review`` (see :mod:`topomodel.report.review.collect`).
"""

from __future__ import annotations

import base64
import contextlib
import errno
import glob
import html
import json
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from topomodel.files import umask
from topomodel.parallel import process_alive
from topomodel.report.output import Report, Table, render, table_columns
from topomodel.report.review.document import (
    Block,
    Callout,
    Cards,
    FigureBlock,
    Review,
    Section,
    Text,
)

REPORT_FILES = ("report.html", "report.md", "report.json")
FIGURE_DIR = "figures"

PNG_DPI = 150
"""Resolution of the figures' PNGs (:data:`topomodel.draw.io.DPI`); the page shows them at
their size in inches (96 CSS pixels per inch), or narrower on a small screen."""

_NUMBER = re.compile(r"^[-+]?(\d[\d,]*\.?\d*|\.\d+)(e[-+]?\d+)?(\s*%|:[\d.]+|\s+\S.*|)$")
_PROVENANCE_CLASSES = {"datasheet", "paper", "secondary", "derived", "unverified",
                       "assumed"}

STYLE = """
:root { --ink: #1f2933; --muted: #52606d; --line: #d9e2ec; --band: #f5f7fa;
        --accent: #1f5f8b; --warn-bg: #fff8e6; --warn-line: #c2410c;
        --note-bg: #eef6fc; --note-line: #1f5f8b; }
* { box-sizing: border-box; }
body { margin: 0; color: var(--ink); background: #fff; line-height: 1.5;
       font: 15px/1.5 -apple-system, BlinkMacSystemFont, "Segoe UI", Roboto,
             "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 32px 64px; }
header { border-bottom: 3px solid var(--accent); padding-bottom: 12px; margin-bottom: 20px; }
h1 { font-size: 28px; margin: 8px 0 4px; }
h2 { font-size: 21px; margin: 40px 0 12px; padding-bottom: 4px;
     border-bottom: 1px solid var(--line); }
h3 { font-size: 15px; margin: 22px 0 8px; color: var(--muted); }
.subtitle { color: var(--muted); margin: 0; }
nav.toc { background: var(--band); border: 1px solid var(--line); border-radius: 6px;
          padding: 10px 18px; margin: 16px 0 8px; }
nav.toc ol { margin: 4px 0; padding-left: 20px; columns: 2; }
nav.toc a { color: var(--accent); text-decoration: none; }
nav.toc a:hover { text-decoration: underline; }
.cards { display: grid; grid-template-columns: repeat(auto-fit, minmax(140px, 1fr));
         gap: 12px; margin: 12px 0 20px; }
.card { border: 1px solid var(--line); border-radius: 6px; padding: 10px 14px;
        background: #fff; }
.card .label { font-size: 12px; text-transform: uppercase; letter-spacing: .04em;
               color: var(--muted); }
.card .value { font-size: 22px; font-weight: 600; margin: 2px 0; }
.card .detail { font-size: 12px; color: var(--muted); }
.card.alert { border-color: var(--warn-line); background: var(--warn-bg); }
.table-wrap { overflow-x: auto; margin: 8px 0 4px; }
table { border-collapse: collapse; font-size: 13.5px; min-width: 40%; }
caption { caption-side: top; text-align: left; font-weight: 600; padding: 4px 0 6px; }
th, td { padding: 5px 10px; border-bottom: 1px solid var(--line); vertical-align: top;
         text-align: left; }
th { background: var(--band); font-weight: 600; border-bottom: 2px solid var(--line);
     white-space: nowrap; }
tbody tr:nth-child(even) td { background: #fbfcfd; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums;
                 white-space: nowrap; }
p.caption { color: var(--muted); font-size: 13px; margin: 2px 0 14px; }
.callout { border-left: 5px solid; border-radius: 4px; padding: 10px 16px; margin: 12px 0; }
.callout.warning { background: var(--warn-bg); border-color: var(--warn-line); }
.callout.note { background: var(--note-bg); border-color: var(--note-line); }
.callout ul { margin: 0; padding-left: 18px; }
.callout .title { font-weight: 700; margin-bottom: 4px; }
.callout.warning .title { color: var(--warn-line); }
figure { margin: 16px 0 20px; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line);
             border-radius: 4px; display: block; }
td:first-child { min-width: 8em; }
figcaption { color: var(--muted); font-size: 13px; margin-top: 4px; }
.badge { display: inline-block; padding: 0 7px; border-radius: 9px; font-size: 12px;
         font-weight: 600; }
.badge.datasheet { background: #dcfce7; color: #166534; }
.badge.paper { background: #dbeafe; color: #1e40af; }
.badge.secondary { background: #fef3c7; color: #92400e; }
.badge.derived { background: #e5e7eb; color: #374151; }
.badge.unverified { background: #ffedd5; color: #9a3412; }
.badge.assumed { background: #fee2e2; color: #991b1b; }
footer { margin-top: 48px; color: var(--muted); font-size: 12px;
         border-top: 1px solid var(--line); padding-top: 8px; }
@page { size: A4; margin: 12mm; }
@media print {
  body { font-size: 10pt; }
  nav.toc { display: none; }
  main { max-width: none; padding: 0; }
  h2 { break-after: avoid; margin-top: 18pt; }
  .table-wrap { overflow: visible; }
  table { width: 100%; min-width: 0; table-layout: auto; font-size: 7.5pt; }
  th, td, td.num, th.num { white-space: normal; overflow-wrap: break-word;
                           padding: 2px 4px; }
  td.prose { overflow-wrap: anywhere; min-width: 12em; }
  td:first-child { min-width: 0; }
  thead { display: table-header-group; }
  tr, figure, .callout, .card { break-inside: avoid; }
  figure img { max-width: 100% !important; height: auto !important; }
  .cards { grid-template-columns: repeat(4, 1fr); }
}
"""
PROSE_CELL_CHARS = 60
"""A table column with a cell longer than this many characters is prose (a source, a
note, a hash, a URL): printed, only its cells may break a word (``overflow-wrap:
anywhere``) and it takes the width the page has left; every other column keeps its words
whole, so a table of short fields beside one long one does not print as 2-3-character
columns. 60 is about the longest field that is one name or figure (a catalog id, a
dotted parameter name, a quantity with both conventions)."""

PRINT_PAGE_WIDTH_PX = round((210 - 2 * 12) / 25.4 * 96)
"""Printable width of the page the print stylesheet sets (A4 portrait, 12 mm margins; US
Letter's is wider), CSS pixels: every table fits in it (tests/report/test_review.py prints the
report to check)."""


# ---------------------------------------------------------------------------- HTML


def render_html(review: Review) -> str:
    """The report as one self-contained HTML page."""
    from topomodel import __version__

    toc = "".join(f'<li><a href="#{s.id}">{_e(s.title)}</a></li>' for s in review.sections)
    body = "\n".join(_html_section(review, s) for s in review.sections)
    return f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{_e(review.title)}</title>
<style>{STYLE}</style>
</head>
<body>
<main>
<header>
<h1>{_e(review.title)}</h1>
<p class="subtitle">{_e(review.subtitle)}</p>
</header>
<nav class="toc" aria-label="Contents"><strong>Contents</strong><ol>{toc}</ol></nav>
{body}
<footer>Written {_e(review.data.get("inputs", {}).get("generated_utc", ""))} by topomodel
{_e(__version__)} (input files and their SHA-256 under Provenance). Bandwidths are per
direction unless marked otherwise; GB = 10<sup>9</sup> bytes, Gb = 10<sup>9</sup> bits.
</footer>
</main>
</body>
</html>
"""


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _html_section(review: Review, section: Section) -> str:
    parts = [f'<section id="{_e(section.id)}">', f"<h2>{_e(section.title)}</h2>"]
    parts += [_html_block(review, b) for b in section.blocks]
    parts.append("</section>")
    return "\n".join(parts)


def _html_block(review: Review, block: Block) -> str:
    if isinstance(block, Text):
        return f"<p>{_e(block.text)}</p>"
    if isinstance(block, Cards):
        cards = []
        for label, value, detail in block.items:
            alert = " alert" if label == "warnings" and value != "0" else ""
            cards.append(f'<div class="card{alert}"><div class="label">{_e(label)}</div>'
                         f'<div class="value">{_e(value)}</div>'
                         f'<div class="detail">{_e(detail)}</div></div>')
        return f'<div class="cards">{"".join(cards)}</div>'
    if isinstance(block, Callout):
        title = "Warnings" if block.level == "warning" else "Note"
        items = "".join(f"<li>{_e(i)}</li>" for i in block.items)
        return (f'<div class="callout {block.level}" role="note"><div class="title">'
                f"{title}</div><ul>{items}</ul></div>")
    if isinstance(block, FigureBlock):
        fig = review.figures.get(block.name)
        if fig is None:
            return ""
        data = base64.b64encode(fig.png).decode("ascii")
        width, height = png_size(fig.png)
        css = round(width * 96 / PNG_DPI)
        return (f'<figure><img src="data:image/png;base64,{data}" width="{width}"'
                f' height="{height}" style="width: {css}px" alt="{_e(fig.caption)}">'
                f"<figcaption>{_e(fig.caption)}</figcaption></figure>")
    return _html_table(block.table, block.caption)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height in pixels of a PNG, from its header.

    Raises
    ------
    ValueError
        If ``data`` is not a PNG.
    """
    if data[:8] != b"\x89PNG\r\n\x1a\n" or data[12:16] != b"IHDR":
        raise ValueError("not a PNG image")
    return int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")


def _html_table(table: Table, caption: str) -> str:
    columns = table_columns(table.rows)
    if not columns:
        return f"<h3>{_e(table.title)}</h3><p>(none)</p>"
    numeric = {c: _is_numeric_column(table.rows, c) for c in columns}
    prose = {c: not numeric[c] and any(len(str(r.get(c, ""))) > PROSE_CELL_CHARS
                                       for r in table.rows) for c in columns}
    head = "".join(f'<th scope="col"{_num(numeric[c])}>{_e(c)}</th>' for c in columns)
    rows = []
    for row in table.rows:
        cells = []
        for c in columns:
            value = row.get(c, "")
            text = str(value)
            if c == "provenance" and text in _PROVENANCE_CLASSES:
                cells.append(f'<td><span class="badge {text}">{_e(text)}</span></td>')
            elif text.startswith(" ") and not numeric[c]:  # a sub-item: indent it
                depth = len(text) - len(text.lstrip(" "))
                cells.append(f'<td style="padding-left: {10 + 8 * depth}px">'
                             f"{_e(text.strip())}</td>")
            elif prose[c]:
                cells.append(f'<td class="prose">{_e(text)}</td>')
            else:
                cells.append(f"<td{_num(numeric[c])}>{_e(text)}</td>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    note = f'<p class="caption">{_e(caption)}</p>' if caption else ""
    return (f'<div class="table-wrap"><table><caption>{_e(table.title)}</caption>'
            f"<thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>"
            f"{note}")


def _num(numeric: bool) -> str:
    return ' class="num"' if numeric else ""


def is_number_text(text: str) -> bool:
    """Whether a cell reads as a number, with or without a unit.

    Examples
    --------
    >>> [is_number_text(t) for t in ("1,016", "450 GB/s (3.6 Tb/s)", "7:1", "37%", "leaf")]
    [True, True, True, True, False]
    """
    return bool(_NUMBER.match(text.strip()))


def _is_numeric_column(rows: Sequence[dict[str, Any]], column: str) -> bool:
    cells = [str(r.get(column, "")).strip() for r in rows]
    cells = [c for c in cells if c and c not in ("-", "?")]
    if not cells:
        return False
    return all(is_number_text(c) for c in cells)


# ------------------------------------------------------------------------ Markdown


def render_markdown(review: Review) -> str:
    """The report as Markdown; figures link to ``figures/NAME.png`` next to it."""
    parts = [f"# {review.title}", "", review.subtitle, "", "## Contents", ""]
    parts += [f"{i}. [{s.title}](#{s.id})" for i, s in enumerate(review.sections, 1)]
    for section in review.sections:
        parts += ["", f'<a id="{section.id}"></a>', "", f"## {section.title}", ""]
        for block in section.blocks:
            parts += [_md_block(review, block), ""]
    parts += ["---", "", "Bandwidths are per direction unless marked otherwise;"
              " GB = 10^9 bytes, Gb = 10^9 bits."]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(parts)).rstrip("\n") + "\n"


def _md_block(review: Review, block: Block) -> str:
    if isinstance(block, Text):
        return _md_escape(block.text)
    if isinstance(block, Cards):
        rows = [{"headline": label, "value": value, "detail": detail}
                for label, value, detail in block.items]
        return _md_table(Table("", rows))
    if isinstance(block, Callout):
        title = "Warnings" if block.level == "warning" else "Note"
        return "\n".join([f"> **{title}**", ">"] + [f"> - {_md_escape(i)}"
                                                    for i in block.items])
    if isinstance(block, FigureBlock):
        fig = review.figures.get(block.name)
        if fig is None:
            return ""
        return f"![{_md_escape(fig.caption)}]({fig.file})\n\n*{_md_escape(fig.caption)}*"
    text = _md_table(block.table)
    return text + (f"\n\n*{_md_escape(block.caption)}*" if block.caption else "")


def _md_escape(text: str) -> str:
    return str(text).replace("|", "\\|").replace("*", "\\*").replace("_", "\\_")


def _md_table(table: Table) -> str:
    columns = table_columns(table.rows)
    heading = f"**{_md_escape(table.title)}**\n\n" if table.title else ""
    if not columns:
        return heading + "(none)"
    numeric = [_is_numeric_column(table.rows, c) for c in columns]
    lines = ["| " + " | ".join(_md_escape(c) for c in columns) + " |",
             "|" + "|".join("---:" if n else ":---" for n in numeric) + "|"]
    for row in table.rows:
        cells = [_md_escape(str(row.get(c, ""))).replace("\n", " ") for c in columns]
        lines.append("| " + " | ".join(cells) + " |")
    return heading + "\n".join(lines)


# ---------------------------------------------------------------------------- JSON


def render_json(review: Review) -> str:
    """``report.json``: ``schema: topomodel.review``, plain types, units in key names."""
    data = {**review.data, "warnings": list(review.warnings)}  # the key, even when empty
    return render(Report("review", data), "json") + "\n"


# --------------------------------------------------------------------------- files


MANIFEST = ".topomodel-review.json"
"""The files a review wrote into its directory, relative to it: the only files a later
review there may replace or remove."""


def write_review(review: Review, directory: str | Path) -> list[Path]:
    """Write report.html, report.md, report.json and figures/ into ``directory``.

    Everything is built in a temporary directory next to it first. A new directory is
    then renamed into place in one step; in an existing one each file is moved in by a
    rename. Only the files an earlier review listed in its :data:`MANIFEST` are replaced,
    or removed where this review has no such file (a figure it no longer draws); any
    other file is left alone, and one this review would overwrite is refused before
    anything moves. An error while writing leaves no part of the new report behind, and
    the staging folder of a review that was killed is removed by the next one.

    Raises
    ------
    UsageError
        When ``directory`` is a symbolic link or a system folder.
    FileExistsError
        When a file the review would write is there and no earlier review wrote it.
    OSError
        When the directory cannot be written.
    """
    from topomodel.files import make_folders, refuse_output_folder, remove_folders

    target = Path(directory)
    refuse_output_folder(target)
    made = make_folders(target.parent)
    _remove_abandoned_staging(target)
    try:
        staging = Path(tempfile.mkdtemp(dir=target.parent,
                                        prefix=f"{_staging_prefix(target)}{os.getpid()}-"))
    except BaseException:
        remove_folders(made)
        raise
    try:
        (staging / FIGURE_DIR).mkdir()
        names = [*REPORT_FILES, *(fig.file for fig in review.figures.values())]
        for fig in review.figures.values():
            (staging / fig.file).write_bytes(fig.png)
        (staging / "report.json").write_text(render_json(review), encoding="utf-8")
        (staging / "report.md").write_text(render_markdown(review), encoding="utf-8")
        (staging / "report.html").write_text(render_html(review), encoding="utf-8")
        (staging / MANIFEST).write_text(json.dumps({"files": names}, indent=1) + "\n",
                                        encoding="utf-8")
        if not target.exists():
            os.chmod(staging, 0o777 & ~umask())  # mkdtemp makes it private
            os.replace(staging, target)
        else:
            _move_into(staging, target, names)
        return [target / name for name in names]
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        remove_folders(made)
        raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _move_into(staging: Path, target: Path, names: list[str]) -> None:
    """Move the review's files from ``staging`` into the existing ``target``: figures
    first, the HTML last (it is what people open), the manifest after it; then remove the
    files the last review wrote that this one does not."""
    if not target.is_dir():
        raise NotADirectoryError(errno.ENOTDIR, f"{target} is a file")
    ours = _earlier_files(target)
    for name in names:
        if name not in ours and os.path.lexists(target / name):
            raise FileExistsError(errno.EEXIST, f"{target / name} was not written by a review"
                                  " (left alone: move it, or choose another folder)")
    figures = target / FIGURE_DIR
    if not figures.is_dir():
        figures.mkdir()
    for name in sorted(names, key=lambda n: (n in REPORT_FILES, n == "report.html")):
        os.replace(staging / name, target / name)
    os.replace(staging / MANIFEST, target / MANIFEST)
    for name in sorted(ours - set(names)):
        with contextlib.suppress(OSError):  # already gone, or no longer a file
            (target / name).unlink()


def _earlier_files(target: Path) -> set[str]:
    """The files an earlier review in ``target`` listed in its manifest (names inside the
    directory only), or none."""
    try:
        listed = json.loads((target / MANIFEST).read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return set()
    inside = {str(n) for n in listed if isinstance(n, str)}
    return {n for n in inside
            if not Path(n).is_absolute() and ".." not in Path(n).parts and n != MANIFEST}


def _staging_prefix(target: Path) -> str:
    return f".{target.name}.partial-"


def _remove_abandoned_staging(target: Path) -> None:
    """Remove the staging folders next to ``target`` whose review process has ended (a
    killed review's); a running review's is left alone."""
    prefix = _staging_prefix(target)
    for folder in target.parent.glob(glob.escape(prefix) + "*"):
        pid = folder.name[len(prefix):].split("-", 1)[0]
        if folder.is_dir() and not folder.is_symlink() and not _alive(pid):
            shutil.rmtree(folder, ignore_errors=True)


def _alive(pid: str) -> bool:
    """Whether the process ``pid`` (text from a folder name) is running; an older
    version's name, without its process, is not."""
    return pid.isdigit() and process_alive(int(pid))

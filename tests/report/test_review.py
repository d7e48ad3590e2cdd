"""The design-review report: files, content, atomic writing, and the page as a person
sees it in headless Chromium."""

import base64
import contextlib
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from topomodel.analysis import assumptions, linkbudget
from topomodel.analysis.training.step import StepAssumptions
from topomodel.cli import main
from topomodel.fabric import cabling
from topomodel.fabric.build import build_fabric
from topomodel.fabric.failures import with_failures
from topomodel.inputs.design import load_design
from topomodel.inputs.parts import PROVENANCES, Model
from topomodel.report.review import collect_review
from topomodel.report.review.document import size_text
from topomodel.report.review.render import MANIFEST, png_size, render_html, write_review
from topomodel.traffic.layout import Layout

SECTIONS = ("summary", "warnings", "topology", "bisection", "collectives", "step",
            "goodput", "failure-domains", "materials", "cost", "assumptions", "provenance")


@pytest.fixture(scope="module")
def server_report(tmp_path_factory):
    """One HGX H100 server with a model: every section, every figure."""
    out = tmp_path_factory.mktemp("server") / "report"
    assert main(["review", "examples/hgx-h100-server.yaml", "--model", "llama3-8b",
                 "--tp", "8", "-o", str(out), "--format", "json"]) == 0
    return out


@pytest.fixture(scope="module")
def superpod_report(tmp_path_factory):
    """The DGX H100 SuperPOD without a model, one collective size to stay quick."""
    out = tmp_path_factory.mktemp("superpod") / "report"
    assert main(["review", "examples/dgx-h100-superpod.yaml", "--size", "64 MiB",
                 "-o", str(out)]) == 0
    return out


def _json(report):
    return json.loads((report / "report.json").read_text())


def test_review_writes_html_markdown_json_and_figures(server_report, capsys):
    names = sorted(p.name for p in server_report.iterdir())
    assert names == [MANIFEST, "figures", "report.html", "report.json", "report.md"]
    assert sorted(p.name for p in (server_report / "figures").iterdir()) == [
        "step.png", "tier-utilization.png", "topology.png"]
    html = (server_report / "report.html").read_text()
    for section in SECTIONS:
        assert f'<section id="{section}">' in html and f'href="#{section}"' in html
    assert "<title>Design review: HGX H100 server</title>" in html
    data = _json(server_report)
    assert data["schema"] == "topomodel.review" and data["version"] == 1
    assert {"design", "summary", "build", "levels", "collectives", "step", "goodput",
            "hotspots", "assumptions", "provenance", "figures", "notes"} <= set(data)
    assert data["goodput"]["interruptions_per_day"] > 0
    assert "failure_rate" in {p["kind"] for p in data["provenance"]}
    assert "GoodputAssumptions.storage_Bps" in {a["where"] for a in data["assumptions"]}
    assert {"tiers", "bisection", "bom", "power", "link_budget"} <= set(data["build"])
    assert [f["file"] for f in data["figures"]] == [
        "figures/topology.png", "figures/tier-utilization.png", "figures/step.png"]


def test_markdown_images_are_files_next_to_it(server_report):
    markdown = (server_report / "report.md").read_text()
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", markdown)
    assert len(links) == 3
    for link in links:
        path = server_report / link
        assert not Path(link).is_absolute() and path.is_file()
        width, height = png_size(path.read_bytes())
        assert width > 300 and height > 200
    for section in SECTIONS:
        assert f'<a id="{section}"></a>' in markdown and f"(#{section})" in markdown


def test_html_is_one_self_contained_file(server_report):
    html = (server_report / "report.html").read_text()
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert not re.search(r"url\(\s*['\"]?(https?:)?//", html)
    assert "<link" not in html and "<script" not in html and "@import" not in html
    images = re.findall(r'<img src="([^"]+)"', html)
    assert len(images) == 3
    for src in images:
        assert src.startswith("data:image/png;base64,")
        width, _ = png_size(base64.b64decode(src.split(",", 1)[1]))
        assert width > 300


def test_collective_table_follows_the_nccl_tests_definitions(server_report):
    collectives = _json(server_report)["collectives"]
    assert collectives["groups"] == {"domain": {"ranks": 8, "groups": 1}}
    assert collectives["sizes_bytes"] == [2**20, 64 * 2**20, 2**30]
    rows = collectives["rows"]
    assert len(rows) == 4 * 3  # four collectives, one group set, three sizes
    factor = {"allreduce": 2 * 7 / 8, "allgather": 7 / 8, "reducescatter": 7 / 8,
              "alltoall": 7 / 8}
    for row in rows:
        assert row["algbw_Bps"] == pytest.approx(row["size_bytes"] / row["time_s"])
        assert row["busbw_Bps"] == pytest.approx(row["algbw_Bps"] * factor[row["collective"]])
        assert row["time_s"] == pytest.approx(row["latency_s"] + row["bandwidth_s"]
                                              + row["topology_s"])
    big = [r for r in rows if r["size_bytes"] == 2**30 and r["collective"] != "allreduce"]
    # 8 H100s on NVSwitch: busbw of a 1 GiB AllGather near the 450 GB/s NVLink figure
    assert all(300e9 < r["busbw_Bps"] <= 450e9 for r in big)


def test_step_in_the_review_is_the_step_command(server_report, capsys):
    step = _json(server_report)["step"]
    assert main(["step", "examples/hgx-h100-server.yaml", "--model", "llama3-8b", "--tp",
                 "8", "--format", "json", "--no-goodput"]) == 0
    alone = json.loads(capsys.readouterr().out)
    for key in ("step_time_s", "mfu", "tokens_per_s", "walls"):
        assert step[key] == pytest.approx(alone[key])
    summary = _json(server_report)["summary"]
    assert summary["step_time_s"] == pytest.approx(alone["step_time_s"])
    assert set(step["walls"]) == {"bandwidth_s", "latency_s", "topology_s", "sync_s"}


def test_every_assumption_is_listed_with_its_value_and_reason(server_report):
    by_where = {}
    for r in _json(server_report)["assumptions"]:
        by_where.setdefault(r["where"], []).append(r)
    overhead = by_where["TimeModel.per_message_overhead_s"][0]
    assert overhead["value"] == assumptions.PER_MESSAGE_OVERHEAD_S and overhead["unit"] == "s"
    assert "kernel launch" in overhead["why"]
    ocs = by_where["linkbudget.OCS_INSERTION_LOSS_DB"][0]
    assert ocs["value"] == linkbudget.OCS_INSERTION_LOSS_DB and "MEMS" in ocs["why"]
    ratio = by_where["cabling.MAX_PART_TO_LINK_RATE"][0]
    assert ratio["value"] == cabling.MAX_PART_TO_LINK_RATE and "twin-port" in ratio["why"]
    base = StepAssumptions()
    efficiency = by_where["StepAssumptions.compute_efficiency"][0]
    assert base.compute_efficiency is None  # an override; the measured curve applies
    assert efficiency["value"] == "measured (not overridden)" and efficiency["why"]
    share = by_where["StepAssumptions.comm_sm_share"][0]
    assert share["value"] == base.comm_sm_share and "DeepSeek-V3" in share["why"]


def test_provenance_lists_every_catalog_entry_used(server_report):
    provenance = {e["id"]: e for e in _json(server_report)["provenance"]}
    assert {"hgx-h100", "h100-sxm", "nvswitch3", "nvlink4", "llama3-8b"} <= set(provenance)
    h100 = provenance["h100-sxm"]
    assert h100["source"] and h100["provenance"] == "datasheet"
    figures = {f["key"]: f for f in h100["figures"]}
    assert "hbm_capacity" in figures and "80 GB" in figures["hbm_capacity"]["value"]
    for entry in provenance.values():
        assert all(f["provenance"] in PROVENANCES for f in entry["figures"])


def test_superpod_review_uses_scale_out_groups(superpod_report, capsys):
    data = _json(superpod_report)
    groups = data["collectives"]["groups"]
    assert groups == {"domain": {"ranks": 8, "groups": 127},
                      "rail": {"ranks": 127, "groups": 8},
                      "all": {"ranks": 1016, "groups": 1}}
    featured = data["collectives"]["featured"]
    # the diagram shows the most loaded collective on scale-out groups at the size
    rows = [r for r in data["collectives"]["rows"] if r["network"] == "scale-out"]
    most = max(rows, key=lambda r: (r["peak_utilization"], r["time_s"]))
    # (the All-to-All over all 1,016 ranks: with SHARP off, as in stock NCCL, the
    # AllReduce no longer reduces in the leaves and loads its links less at 64 MiB)
    assert featured["collective"] == most["collective"] == "alltoall"
    assert list(featured["groups"]) == [most["group"]] and featured["size_bytes"] == 2**26
    assert featured["time_s"] == most["time_s"]
    # the hottest link is in the tier whose links are busiest
    busiest = max(featured["tiers"], key=lambda t: t["peak_utilization"])
    assert data["hotspots"] and data["hotspots"][0]["tier"] == busiest["name"]
    assert data["hotspots"][0]["utilization"] == pytest.approx(busiest["peak_utilization"])
    assert [lv["npus"] for lv in data["levels"]] == [8, 127]
    assert data["step"] is None
    html = (superpod_report / "report.html").read_text()
    assert "No model was given" in html and "The fabric as levels" in html
    assert "64 MiB" in html and "1,016" in html
    capsys.readouterr()


def test_warnings_name_optics_spills_oversubscription_and_failures(tmp_path):
    design = tmp_path / "four.yaml"
    design.write_text(
        "name: four DGX, 3:1 leaves\nsystem: dgx-h100\nsystems: 4\n"
        "scaleout: {kind: fat_tree, switch: qm9700, unit: 2, tiers: 2,"
        " oversubscription: ['3:1']}\n"
        "layout: {connectors: 4, cables: {spine: osfp-400g-dr4}}\n")
    d, catalog = load_design(design)
    fabric = with_failures(build_fabric(d, catalog), ["spine0"])
    layout = Layout(tp=16, dp=2)
    review = collect_review(fabric, model=catalog.get("llama3-8b", Model), layout=layout,
                            sizes_bytes=[2**20], failed=["spine0"])
    said = "\n".join(review.warnings)
    assert "optical link does not close" in said and "osfp-400g-dr4" in said
    assert "TP groups leave the scale-up domain" in said
    # 16 ports per leaf at 3:1 take 6 uplinks: 2.67:1 realised, and both ratios said
    assert "DP traffic" in said and "leaf tier, oversubscribed 2.67:1" in said
    assert "leaf tier realises 2.67:1 for the asked 3:1" in said
    assert "failed parts: spine0" in said
    html = render_html(review)
    callout = html.split('<div class="callout warning"', 1)[1].split("</div></div>", 1)[0]
    assert "optical link does not close" in callout and "oversubscribed 2.67:1" in callout


def test_fabric_without_scale_up_reviews_over_the_fat_tree_only(toy):
    fabric = toy("""
        name: toy hosts
        system: toy-host
        systems: 16
        scaleout: {kind: fat_tree, switch: toy-switch-4, tiers: 3}
        """)
    review = collect_review(fabric, sizes_bytes=[2**20])
    assert review.data["collectives"]["groups"] == {"all": {"ranks": 16, "groups": 1}}
    assert review.data["collectives"]["featured"]["collective"] in (
        "allreduce", "allgather", "reducescatter", "alltoall")
    assert set(review.figures) == {"topology", "tier-utilization"}
    assert [lv["npus"] for lv in review.data["levels"]] == [16]


def test_unknown_model_is_one_line_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "report"
    status = main(["review", "examples/hgx-h100-server.yaml", "--model", "llama-9",
                   "-o", str(out)])
    err = capsys.readouterr().err
    assert status == 2 and err.startswith("topomodel: error: ") and err.count("\n") == 1
    assert "unknown model id 'llama-9'" in err
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_layout_that_does_not_fit_writes_nothing(tmp_path, capsys):
    status = main(["review", "examples/hgx-h100-server.yaml", "--model", "llama3-8b",
                   "--tp", "3", "-o", str(tmp_path / "r")])
    assert status == 2 and "tp=3" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unwritable_output_is_a_clean_error(tmp_path, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    status = main(["review", "examples/hgx-h100-server.yaml", "--size", "1 MiB", "-o",
                   str(blocker / "report")])
    err = capsys.readouterr().err
    assert status == 2 and "cannot write" in err and err.count("\n") == 1


def test_rewriting_a_report_replaces_only_what_a_review_wrote(tmp_path, server_report):
    target = tmp_path / "r"
    shutil.copytree(server_report, target)
    assert (target / "figures" / "step.png").exists()  # the last review's: ours to remove
    (target / "figures" / "plot.png").write_bytes(b"mine")
    (target / "notes.txt").write_text("mine")
    d, catalog = load_design("examples/hgx-h100-server.yaml")
    review = collect_review(build_fabric(d, catalog), sizes_bytes=[2**20])
    write_review(review, target)
    assert (target / "notes.txt").read_text() == "mine"  # not ours: left alone
    assert (target / "figures" / "plot.png").read_bytes() == b"mine"  # it was deleted
    assert sorted(p.name for p in (target / "figures").iterdir()) == [
        "plot.png", "tier-utilization.png", "topology.png"]  # no step figure without a model
    assert _json(target)["step"] is None
    assert [p.name for p in tmp_path.iterdir()] == ["r"]  # no staging left behind
    assert json.loads((target / MANIFEST).read_text())["files"] == [
        "report.html", "report.md", "report.json", "figures/topology.png",
        "figures/tier-utilization.png"]


def test_a_review_into_a_folder_of_the_users_files_keeps_them(tmp_path, capsys):
    # the issue's case: mkdir -p proj/figures && echo mine > proj/figures/plot.png
    (tmp_path / "proj" / "figures").mkdir(parents=True)
    (tmp_path / "proj" / "figures" / "plot.png").write_text("mine")
    args = ["review", "examples/hgx-h100-server.yaml", "--size", "1 MiB", "-o",
            str(tmp_path / "proj")]
    assert main(args) == 0
    assert (tmp_path / "proj" / "figures" / "plot.png").read_text() == "mine"
    assert (tmp_path / "proj" / "figures" / "topology.png").stat().st_size > 0
    assert main(args) == 0  # again: the manifest lets it replace its own files
    assert (tmp_path / "proj" / "figures" / "plot.png").read_text() == "mine"


def test_a_file_the_review_would_overwrite_and_did_not_write_is_refused(tmp_path, capsys):
    (tmp_path / "proj" / "figures").mkdir(parents=True)
    mine = tmp_path / "proj" / "figures" / "topology.png"
    mine.write_text("mine")
    status = main(["review", "examples/hgx-h100-server.yaml", "--size", "1 MiB", "-o",
                   str(tmp_path / "proj")])
    err = capsys.readouterr().err
    assert status == 2 and err.count("\n") == 1
    assert "topology.png was not written by a review" in err
    assert mine.read_text() == "mine"
    assert sorted(p.name for p in (tmp_path / "proj").iterdir()) == ["figures"]
    assert [p.name for p in tmp_path.iterdir()] == ["proj"]


def test_a_killed_reviews_staging_folder_is_removed_by_the_next(tmp_path, server_report):
    target = tmp_path / "r"
    ended = subprocess.Popen(["true"])  # a killed review's process: ended, its id free
    ended.wait()
    abandoned = [tmp_path / ".r.partial-old", tmp_path / f".r.partial-{ended.pid}-x"]
    for folder in abandoned:
        (folder / "figures").mkdir(parents=True)
    running = tmp_path / f".r.partial-{os.getpid()}-y"  # a review still at work
    running.mkdir()
    d, catalog = load_design("examples/hgx-h100-server.yaml")
    write_review(collect_review(build_fabric(d, catalog), sizes_bytes=[2**20]), target)
    assert sorted(p.name for p in tmp_path.iterdir()) == [running.name, "r"]


def test_size_text_uses_binary_prefixes_for_binary_sizes():
    assert [size_text(s) for s in (2**20, 3 * 2**30, 1e6)] == ["1 MiB", "3 GiB", "1 MB"]


# ------------------------------------------------------------ as a person sees it


def _chromium():
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


class _DevTools:
    """Chrome DevTools Protocol over ``--remote-debugging-pipe``: JSON messages ending
    in NUL, written to the browser's fd 3 and read from its fd 4."""

    def __init__(self, browser, window=(1280, 2000)):
        to_browser_r, self._to_browser = os.pipe()
        self._from_browser, from_browser_w = os.pipe()

        def wire():  # in the child: the pipe ends become fds 3 and 4
            write_end = os.dup(from_browser_w) if from_browser_w == 3 else from_browser_w
            os.dup2(to_browser_r, 3)
            os.dup2(write_end, 4)

        self.process = subprocess.Popen(
            [browser, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
             "--remote-debugging-pipe", "--no-first-run", "--disable-extensions",
             f"--window-size={window[0]},{window[1]}", "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            preexec_fn=wire, pass_fds=(3, 4))
        os.close(to_browser_r)
        os.close(from_browser_w)
        self._buffer = b""
        self._next = 0
        self.events = []

    def send(self, method, params=None, session=None, timeout=30.0):
        self._next += 1
        message = {"id": self._next, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._to_browser, json.dumps(message).encode() + b"\0")
        reply = self.wait(lambda m: m.get("id") == self._next, timeout)
        if "error" in reply:
            raise RuntimeError(f"{method}: {reply['error']}")
        return reply.get("result", {})

    def wait(self, match, timeout=30.0):
        deadline = time.monotonic() + timeout
        while True:
            while b"\0" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\0", 1)
                message = json.loads(raw)
                if "method" in message:
                    self.events.append(message)
                if match(message):
                    return message
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_browser], [], [], left)[0]:
                raise TimeoutError("no answer from Chromium")
            chunk = os.read(self._from_browser, 1 << 20)
            if not chunk:
                raise RuntimeError("Chromium closed the pipe: "
                                   + self.process.stderr.read().decode()[-500:])
            self._buffer += chunk

    def close(self):
        with contextlib.suppress(OSError, RuntimeError, TimeoutError):
            self.send("Browser.close", timeout=5)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        os.close(self._to_browser)
        os.close(self._from_browser)


def test_report_renders_in_headless_chromium(server_report, tmp_path):
    """Open report.html as a reader would: the page loads with its title, every image
    decodes to a real size, nothing is logged as an error, and a screenshot shows it.

    The checks go through the DevTools protocol on a pipe (no port, no test code in the
    report): console errors and exceptions arrive as events, the images are inspected
    in the page after its load event, and the screenshot is the browser's own."""
    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed (Debian: apt-get install chromium;"
                    " .ci/run installs it where apt-get is available)")
    tools = _DevTools(browser)
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = tools.send("Target.attachToTarget",
                             {"targetId": target, "flatten": True})["sessionId"]
        for domain in ("Page", "Runtime", "Log"):
            tools.send(f"{domain}.enable", session=session)
        tools.send("Emulation.setDeviceMetricsOverride", {
            "width": 1280, "height": 2000, "deviceScaleFactor": 1, "mobile": False},
            session=session)
        url = (server_report / "report.html").resolve().as_uri()
        tools.send("Page.navigate", {"url": url}, session=session)
        tools.wait(lambda m: m.get("method") == "Page.loadEventFired"
                   and m.get("sessionId") == session, timeout=60)
        probe = ("JSON.stringify({title: document.title,"
                 " h1: document.querySelector('h1').textContent,"
                 " sections: document.querySelectorAll('main section').length,"
                 " images: Array.from(document.images).map(i => ({done: i.complete,"
                 " w: i.naturalWidth, h: i.naturalHeight, shown: i.clientWidth}))})")
        result = tools.send("Runtime.evaluate", {"expression": probe,
                                                 "returnByValue": True}, session=session)
        page = json.loads(result["result"]["value"])
        shot = tools.send("Page.captureScreenshot", {"format": "png"}, session=session)
    finally:
        tools.close()
    screenshot = tmp_path / "report.png"
    screenshot.write_bytes(base64.b64decode(shot["data"]))
    assert page["title"] == "Design review: HGX H100 server"
    assert page["h1"] == page["title"] and page["sections"] == len(SECTIONS)
    assert len(page["images"]) == 3
    for image in page["images"]:
        assert image["done"] and image["w"] > 300 and image["h"] > 200 and image["shown"] > 0
    errors = [e for e in tools.events if
              (e["method"] == "Runtime.consoleAPICalled" and e["params"]["type"] == "error")
              or e["method"] == "Runtime.exceptionThrown"
              or (e["method"] == "Log.entryAdded"
                  and e["params"]["entry"]["level"] == "error")]
    assert errors == []
    width, height = png_size(screenshot.read_bytes())
    assert (width, height) == (1280, 2000)
    from PIL import Image

    colours = Image.open(screenshot).convert("RGB").getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50  # text, cards, tables: not a blank page


@contextlib.contextmanager
def _printed(report):
    """Chromium (the test skips without it) showing ``report``'s HTML as print media at
    the print stylesheet's page width: (the DevTools connection, its page session)."""
    from topomodel.report.review.render import PRINT_PAGE_WIDTH_PX

    browser = _chromium()
    if browser is None:
        pytest.skip("Chromium is not installed")
    tools = _DevTools(browser, window=(PRINT_PAGE_WIDTH_PX, 1200))
    try:
        target = tools.send("Target.createTarget", {"url": "about:blank"})["targetId"]
        session = tools.send("Target.attachToTarget",
                             {"targetId": target, "flatten": True})["sessionId"]
        tools.send("Page.enable", session=session)
        tools.send("Emulation.setDeviceMetricsOverride", {
            "width": PRINT_PAGE_WIDTH_PX, "height": 1200, "deviceScaleFactor": 1,
            "mobile": False}, session=session)
        tools.send("Emulation.setEmulatedMedia", {"media": "print"}, session=session)
        tools.send("Page.navigate", {"url": (report / "report.html").as_uri()},
                   session=session)
        tools.wait(lambda m: m.get("method") == "Page.loadEventFired"
                   and m.get("sessionId") == session, timeout=60)
        yield tools, session
    finally:
        tools.close()


def test_printed_report_fits_every_table_on_the_page(superpod_report, tmp_path):
    """Print media at the print stylesheet's page width: no table is wider than the
    page (none clipped), and the page prints to a PDF."""
    from topomodel.report.review.render import PRINT_PAGE_WIDTH_PX

    with _printed(superpod_report) as (tools, session):
        probe = ("JSON.stringify(Array.from(document.querySelectorAll('table')).map(t =>"
                 " ({caption: t.caption ? t.caption.textContent : '',"
                 " right: t.getBoundingClientRect().right,"
                 " width: t.scrollWidth})))")
        tables = json.loads(tools.send("Runtime.evaluate", {
            "expression": probe, "returnByValue": True}, session=session)["result"]["value"])
        page = tools.send("Runtime.evaluate", {
            "expression": "document.documentElement.clientWidth", "returnByValue": True},
            session=session)["result"]["value"]
        pdf = tools.send("Page.printToPDF", {"preferCSSPageSize": True}, session=session,
                         timeout=120)
    assert len(tables) > 10 and page == PRINT_PAGE_WIDTH_PX
    wide = [t["caption"] for t in tables if t["right"] > page + 1 or t["width"] > page + 1]
    assert wide == []
    assert base64.b64decode(pdf["data"])[:5] == b"%PDF-"



# Each table cell's words (split where a line may break: spaces, hyphens, dashes,
# slashes) of up to 24 characters, measured in the cell's own font: one wider than the
# cell's content box was broken inside the word. Longer tokens (URLs, hashes) may break.
_BROKEN_WORDS = r"""
(() => {
  const pen = document.createElement('canvas').getContext('2d');
  return JSON.stringify(Array.from(document.querySelectorAll('table')).map(t => {
    const broken = [];
    for (const cell of t.querySelectorAll('td, th')) {
      const cs = getComputedStyle(cell);
      pen.font = `${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
      const inner = cell.getBoundingClientRect().width - parseFloat(cs.paddingLeft)
        - parseFloat(cs.paddingRight) - parseFloat(cs.borderLeftWidth)
        - parseFloat(cs.borderRightWidth);
      for (const word of cell.textContent.split(/[\s\-\u2013/]+/)) {
        if (word && word.length <= 24 && pen.measureText(word).width > inner + 1) {
          broken.push(word);
        }
      }
    }
    return {caption: t.caption ? t.caption.textContent : '', broken: broken.slice(0, 5),
            right: t.getBoundingClientRect().right};
  }));
})()
"""


def test_printed_tables_keep_their_words_whole(server_report):
    """Printed to A4 (print media at the page's width), the provenance, sources and
    assumptions tables keep readable columns: no word of a short field is broken into
    2-3-character pieces (before, the Figures table's entry column was 16 px wide and
    130 of its words were broken); only a prose column (a source, a note, a hash) may
    break a long token, and every table still fits the page."""
    from topomodel.report.review.render import PRINT_PAGE_WIDTH_PX

    with _printed(server_report) as (tools, session):
        tables = json.loads(tools.send("Runtime.evaluate", {
            "expression": _BROKEN_WORDS, "returnByValue": True},
            session=session)["result"]["value"])
    captions = {t["caption"] for t in tables}
    assert {"Assumptions", "Figures", "Sources", "Bibliography"} <= captions
    assert [(t["caption"], t["broken"]) for t in tables if t["broken"]] == []
    assert all(t["right"] <= PRINT_PAGE_WIDTH_PX + 1 for t in tables)

def test_review_has_its_bibliography_date_version_and_input_hashes(server_report):
    import hashlib

    from topomodel import __version__
    from topomodel.inputs.sources import cited_tags

    data = _json(server_report)
    cited = {t for e in data["provenance"] for t in cited_tags(e["source"] + " " + e["notes"])}
    listed = {b["tag"]: b for b in data["bibliography"]}
    assert cited and set(listed) == cited
    assert all(not b["citation"].startswith("(not in") for b in listed.values())
    inputs = data["inputs"]
    assert inputs["topomodel_version"] == __version__ and inputs["generated_utc"][:2] == "20"
    design = next(f for f in inputs["files"] if f["role"] == "design")
    assert design["sha256"] == hashlib.sha256(
        Path("examples/hgx-h100-server.yaml").read_bytes()).hexdigest()
    assert any(f["role"] == "built-in catalog" for f in inputs["files"])
    assert len({f["file"] for f in inputs["files"]}) == len(inputs["files"])
    html = (server_report / "report.html").read_text()
    assert "Bibliography" in html and design["sha256"] in html
    assert inputs["generated_utc"] in html and __version__ in html


def test_superpod_review_has_the_single_failure_what_ifs(superpod_report):
    data = _json(superpod_report)
    rows = data["single_failures"]
    assert [r["kind"] for r in rows] == ["spine", "leaf", "optic", "nic"]
    featured = data["collectives"]["featured"]
    for r in rows:
        assert r["part"] and r["on_failure"] in ("stops_job", "degrades")
        assert r["healthy_collective_s"] == pytest.approx(featured["time_s"])
        assert r["collective_s"] >= r["healthy_collective_s"] * (1 - 1e-12)
        assert r["step_s"] is None  # no model
    html = (superpod_report / "report.html").read_text()
    assert "Single-failure what-ifs" in html and "leaf00 (qm9700, leaf)" in html


def test_superpod_review_has_the_blast_radius_and_its_worst_row_in_the_summary(
        superpod_report):
    from topomodel.analysis.reliability.blast_radius import blast_radius, blast_radius_records

    data = _json(superpod_report)
    fabric = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    expected = blast_radius_records(blast_radius(fabric, every=("rack", "power_feed")))
    assert len(data["failure_domains"]) == len(expected)
    for got, want in zip(data["failure_domains"], expected, strict=True):
        assert got == pytest.approx(want)  # row by row: approx takes no nested lists
    assert [(r["kind"], r["pick"]) for r in data["failure_domains"]] == [
        ("rack", ""), ("power_feed", ""), ("cooling_loop", ""), ("plane", ""), ("site", ""),
        ("rack", "worst"), ("rack", "median"), ("power_feed", "worst"),
        ("power_feed", "median")]
    # 127 servers: the last of 32 racks holds 3, the last of 8 feeds 15; the job (no
    # model: every GPU) is stopped by every one, the worst the first, the median the 16th
    # of 32 ranked from the least (rack 31 holds fewest; then 30, 29, ... by number)
    picks = {(r["kind"], r["pick"]): r for r in data["failure_domains"] if r["pick"]}
    assert picks["rack", "worst"]["domain"] == 0
    assert picks["rack", "median"]["domain"] == 16
    assert picks["rack", "median"]["accelerators_stopped"] == 32
    # 127 DGX H100 in racks of 4 servers (the default): a rack stops 32 GPUs
    assert data["failure_domains"][0]["accelerators_stopped"] == 32
    summary = data["summary"]
    assert summary["worst_failure_domain"] == "site"  # one site: it holds everything
    assert summary["worst_failure_domain_accelerators_stopped"] == 1016
    html = (superpod_report / "report.html").read_text()
    assert '<section id="failure-domains">' in html and "Failure domains" in html
    assert "worst failure domain" in (superpod_report / "report.md").read_text()


def test_each_all_gather_runs_with_the_reduce_scatter_of_its_groups_and_size():
    from topomodel.report.review.collect import plan_collectives, run_pieces

    fabric = build_fabric(*load_design("examples/dgx-h100-superpod.yaml"))
    runs = plan_collectives(fabric, None).runs
    pieces = run_pieces(runs)
    assert sorted(k for piece in pieces for k in piece) == list(range(len(runs)))
    pairs = [piece for piece in pieces if len(piece) == 2]
    assert pairs and all(
        (runs[a][4], runs[b][4]) == ("allgather", "reducescatter")
        and (runs[a][0], runs[a][6]) == (runs[b][0], runs[b][6]) for a, b in pairs)
    assert len(pairs) == sum(r[4] == "allgather" for r in runs)  # every one is paired
    assert [piece[0] for piece in pieces] == sorted(piece[0] for piece in pieces)


def test_a_layout_over_the_memory_is_said_before_its_step_and_the_json_has_warnings():
    from topomodel.report.review.render import render_json

    design, catalog = load_design("examples/hgx-h100-server.yaml")
    fabric = build_fabric(design, catalog)
    over = collect_review(fabric, model=catalog.get("llama3-70b", Model), layout=Layout(tp=8),
                          sizes_bytes=[2**20], workers=1)
    assert over.data["summary"]["fits"] is False
    items = [row["item"] for row in over.headline]
    memory = items.index("memory")  # right before the step's numbers
    assert items[memory + 1] == "step time"
    assert over.headline[memory]["value"].startswith("DOES NOT FIT: needs ")
    bare = collect_review(build_fabric(*load_design("examples/cloudmatrix384.yaml")),
                          sizes_bytes=[2**20], workers=1)
    assert "fits" not in bare.data["summary"]
    assert json.loads(render_json(bare))["warnings"] == list(bare.warnings)


def _sharp_design(enabled: bool):
    text = ("system: dgx-h100\nsystems: 4\nscaleout:\n  kind: fat_tree\n  switch: qm9700\n"
            f"  in_network_reduction: {'true' if enabled else 'false'}\n")
    return build_fabric(*load_design("sharp.yaml", text=text))


def test_sharp_capable_switches_show_the_in_network_reduction_what_if():
    """QM9700 can reduce (SHARP) and the design leaves it off: the review times the
    scale-out AllReduce with it on beside the default; enabled, there is no what-if."""
    review = collect_review(_sharp_design(False), sizes_bytes=[2**28], workers=1)
    rows = review.data["in_network_what_if"]
    assert rows and {r["group"] for r in rows} <= {"rail", "all"}
    assert all(r["default_algorithm"] != "innetwork" for r in rows)
    assert any(r["enabled_algorithm"] == "innetwork" and r["speedup"] > 1 for r in rows)
    assert "in-network-what-if" in {s.id for s in review.sections}
    shown = collect_review(_sharp_design(True), sizes_bytes=[2**28], workers=1)
    assert shown.data["in_network_what_if"] == []


def test_a_layout_that_does_not_fit_is_the_first_summary_card(tmp_path):
    """Llama 3 8B unsharded on 80 GB A100s: the summary's first card, in HTML and
    Markdown, says the step does not fit, before the step time and MFU."""
    from topomodel.cli import main as cli_main

    out = tmp_path / "review"
    assert cli_main(["review", "examples/small-2x2-a100-1gbe.yaml", "--model", "llama3-8b",
                     "--compute-efficiency", "0.5", "--dp", "4", "-o", str(out)]) == 0
    md = (out / "report.md").read_text()
    cards = md[md.index("| memory | does not fit"):]
    assert cards.index("does not fit") < cards.index("step time")
    html = (out / "report.html").read_text()
    first = html.index('<div class="cards"><div class="card"><div class="label">memory')
    assert "does not fit" in html[first:first + 200]

"""Numbers that link to the record they came from: the value type, its Markdown and HTML output,
and a rendered report whose answer numbers open record files that exist."""

import gzip
import html.parser
import json
import os
import re
import shutil
from pathlib import Path
from urllib.parse import unquote

from cs336report.records.store import load
from cs336report.report.render import environments, md_cell, md_code, record_href, render_report
from cs336report.report.tables import Cell, Num, Table, fmt_mean_std, fmt_seconds, sig, source_of, with_source

FIXTURES = Path(__file__).parent / "fixtures"
ODD_TEXT = "1|2 [x] *y* _z_ `c` <b> & \\"
ODD_PATH = "report/data/odd dir (1)/a#b?c[d]%e|f.json.gz"
MD_LINK = re.compile(r"(?<!\\)\[((?:\\.|[^\]\\\n])*)\]\(([^)\s]*)\)")


class Anchors(html.parser.HTMLParser):
    """Every <a class="rec">: its href (attribute value unescaped) and its text."""

    def __init__(self):
        super().__init__()
        self.links, self._open = [], None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "a" and attrs.get("class") == "rec":
            self._open = [attrs["href"], ""]

    def handle_data(self, data):
        if self._open is not None:
            self._open[1] += data

    def handle_endtag(self, tag):
        if tag == "a" and self._open is not None:
            self.links.append(tuple(self._open))
            self._open = None


def html_links(text: str) -> list[tuple[str, str]]:
    parser = Anchors()
    parser.feed(text)
    return parser.links


def test_a_num_is_its_text_and_only_itself_links():
    n = Num("3.10 ms", "results/x/a.json")
    assert n == "3.10 ms" and n.source == "results/x/a.json" and source_of(n) == "results/x/a.json"
    for derived in (n + " a step", f"{n}", n.upper(), "at " + n, n.split(" ")[0]):
        assert source_of(derived) is None  # any str operation gives a plain str
    assert source_of("3.10 ms") is None and source_of(Num("1")) is None
    assert Num(n).source == n.source  # a Num of a Num keeps its record
    assert Num("1", float("nan")).source is None and Num("1", "").source is None  # a frame's missing source


def test_a_cell_with_a_source_carries_it_in_its_text():
    c = Cell("21.2 ± 0.18", source="results/benchmarking/a.json")
    assert c.text == "21.2 ± 0.18" and source_of(c.text) == c.source == "results/benchmarking/a.json"
    assert source_of(Cell("OOM", "oom", source="results/a.json").text) is None  # only a value links
    assert Cell(Num("7", "r.json")).source == "r.json"
    assert source_of(with_source(Cell("–"), "r.json").text) is None
    assert source_of(with_source(Cell("12 ms"), "r.json").text) == "r.json"
    assert with_source(Cell("12 ms"), float("nan")).source is None  # a frame's missing source


def test_record_href_is_relative_to_the_report_folder_and_percent_encoded(tmp_path):
    assert record_href("report/data/benchmarking/a.json.gz", Path("report")) == "data/benchmarking/a.json.gz"
    href = record_href(str(tmp_path / "results" / "odd dir (1)" / "a#b.json"), tmp_path / "report")
    assert href == "../results/odd%20dir%20%281%29/a%23b.json"
    assert unquote(href) == "../results/odd dir (1)/a#b.json"
    assert record_href("results/x.json", None) == "results/x.json"


def test_markdown_writes_a_link_with_escaped_text_and_an_encoded_address():
    env = environments(Path("report"))["md"]
    value = Num(ODD_TEXT, ODD_PATH)
    out = env.from_string("at {{ v }}; {{ v | mdtext }}; {{ plain }}; {{ v | mdcode }}").render(v=value, plain="a<b")
    link = f"[{md_cell(ODD_TEXT)}]({record_href(ODD_PATH, Path('report'))})"
    assert out == f"at {link}; {link}; a&lt;b; {md_code(ODD_TEXT)}"  # a code span stays literal, unlinked
    text, href = MD_LINK.search(out).groups()
    assert not set(" ()<>|[]#?") & set(href) and unquote(href) == ODD_PATH.removeprefix("report/")
    assert "<b>" not in text and "&lt;b&gt;" in text and "\\|" in text  # escaped as a table cell


def test_a_linked_table_cell_keeps_the_markdown_table_whole():
    fmt = environments(Path("report"))["md"].get_template("_md.j2").module
    table = Table(title="t", columns=["a", "b"], rows=[[Cell("x"), Cell(ODD_TEXT, source=ODD_PATH)]])
    rows = [line for line in str(fmt.table(table)).splitlines() if line.startswith("| ") and "---" not in line]
    header, row = rows[0], rows[1]
    assert row.replace("\\|", "").count("|") == header.count("|")
    assert MD_LINK.search(row).group(2) == record_href(ODD_PATH, Path("report"))


def test_html_writes_an_anchor_with_escaped_text_and_address():
    env = environments(Path("report"))["html"]
    out = env.from_string("<p>{{ v }} {{ v | mdtext }} {{ plain }}</p>").render(v=Num(ODD_TEXT, ODD_PATH),
                                                                                plain="<i>")
    assert "<b>" not in out and "&lt;i&gt;" in out
    links = html_links(out)
    assert links == [(record_href(ODD_PATH, Path("report")), ODD_TEXT)] * 2
    fmt = env.get_template("_html.j2").module
    cell = str(fmt.table(Table(title="t", columns=["a"], rows=[[Cell("12.5", source=ODD_PATH)]])))
    assert '<td class="ok num"><a class="rec" href="' in cell  # still a number's cell: not wrapped
    assert html_links(cell) == [(record_href(ODD_PATH, Path("report")), "12.5")]


def _copy_records(tmp_path: Path, folder: str) -> list[Path]:
    """The H200 benchmarking (context 128) and warm-up fixtures as a run's results, under a folder
    name that needs encoding in a link."""
    paths = []
    for experiment, fixtures in (("benchmarking", "benchmarking_h200"), ("benchmarking_warmup", "warmup_h200")):
        for src in sorted((FIXTURES / fixtures).glob("*.json.gz")):
            if experiment == "benchmarking" and "-ctx128-" not in src.name:
                continue  # (b)'s table shows one context: the one with both modes
            record = json.loads(gzip.decompress(src.read_bytes()))
            dest = tmp_path / folder / experiment / src.name.removesuffix(".gz")
            dest.parent.mkdir(parents=True, exist_ok=True)
            dest.write_text(json.dumps(record))
            paths.append(dest)
    return paths


def _warmup_values(record: dict) -> set[str]:
    """What (c) may quote of one warm-up cell: its first step, the mean of the rest, their ratio,
    its mean and its standard deviation, formatted as the answer formats them."""
    times, stats = record["data"]["times_s"]["measured_s"], record["data"]["stats_s"]
    first, rest = times[0], sum(times[1:]) / len(times[1:])
    return {fmt_seconds(first), fmt_seconds(rest), sig(first / rest), fmt_seconds(stats["mean"]),
            fmt_seconds(stats["std"])}


def _block(text: str, start: str, end: str) -> str:
    return text.split(start, 1)[1].split(end, 1)[0]


def test_answer_numbers_link_to_the_records_they_come_from(tmp_path):
    paths = _copy_records(tmp_path, "run results (1)")
    out = tmp_path / "report"
    render_report(paths, {"_device": "cuda", "_grid": "gpu"}, out)
    md = (out / "answers.md").read_text()
    for _, href in MD_LINK.findall(md):
        if not href.startswith("#"):
            assert (out / unquote(href.split("#")[0])).exists(), href  # every link of the answers opens a file
    records = {p.resolve(): load(p) for p in paths}

    # (b): each table cell is one cell's mean ± std, linked to that cell's record
    part_b = _block(md, 'id="benchmarking_script-b"', 'id="benchmarking_script-c"')
    cells = [MD_LINK.findall(line) for line in part_b.splitlines() if line.startswith("| small")]
    assert cells and all(len(row) == 2 for row in cells)
    (fwd_text, fwd_href), (bwd_text, bwd_href) = cells[0]
    forward = records[(out / unquote(fwd_href)).resolve()]
    backward = records[(out / unquote(bwd_href)).resolve()]
    assert (forward["experiment"], forward["config"]["mode"]) == ("benchmarking", "forward")
    assert (backward["experiment"], backward["config"]["mode"]) == ("benchmarking", "forward_backward")
    stats = forward["data"]["stats_s"]
    assert fwd_text == md_cell(fmt_mean_std(stats["mean"], stats["std"], 1e-3))

    # (c): the warm-up numbers link to the cells with 0 and with the most warm-up steps
    part_c = _block(md, 'id="benchmarking_script-c"', "<sub>Evidence")
    linked = MD_LINK.findall(part_c)
    assert len(linked) >= 7
    steps = {records[(out / unquote(h)).resolve()]["config"]["warmup_steps"] for _, h in linked}
    assert {0, 5} <= steps and steps <= {0, 1, 2, 5}
    first = records[(out / unquote(linked[0][1])).resolve()]
    assert first["config"]["warmup_steps"] == 0
    assert linked[0][0] == fmt_seconds(first["data"]["times_s"]["measured_s"][0])
    for text, href in linked:  # each linked number is a value of the record it links to
        assert text in _warmup_values(records[(out / unquote(href)).resolve()]), (text, href)
    assert "(median)" in part_b and not re.search(r"\]\([^)]*\) of the mean \(median\)", part_b)  # a median: plain

    # the HTML page links the same numbers, to the same files
    page = (out / "index.html").read_text()
    anchors = html_links(page)
    assert anchors and all((out / unquote(h)).exists() for h, _ in anchors)
    assert {(t, (out / unquote(h)).resolve()) for h, t in anchors} >= {
        (text.replace("\\", ""), (out / unquote(href)).resolve()) for text, href in cells[0] + linked}


def test_the_committed_answers_link_numbers_to_published_records():
    report = Path(__file__).resolve().parent.parent / "report"
    md = (report / "answers.md").read_text()
    links = MD_LINK.findall(md)
    records = [h for _, h in links if ".json" in h]
    assert len(records) > 100
    for _, href in links:
        if not href.startswith(("#", "http")):
            assert (report / unquote(href.split("#")[0])).exists(), href
    part_b = _block(md, 'id="benchmarking_script-b"', 'id="benchmarking_script-c"')
    part_c = _block(md, 'id="benchmarking_script-c"', "<sub>Evidence")
    for part, folder in ((part_b, "data/benchmarking/"), (part_c, "data/benchmarking_warmup/")):
        assert any(h.startswith(folder) for _, h in MD_LINK.findall(part)), folder

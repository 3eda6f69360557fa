"""report.html as a person opens it: headless Chromium loads the page that `flexcheck check
--report` wrote for a few generated cases (one passing, one failing with a diagnosis, one outside
the contract, a float32 one; case ids and a producer holding `<script>`, quotes and a literal
`&amp;`) and the DOM after load must hold the scatter charts with one marker per measured row,
the rows table in the written order (failed, then outside the contract, then the rest) with
every string as it was, no script from a row, and a table that sorts when a header is clicked.
Every expectation is worked out here from the report's own rows.json.

Needs FLEXCHECK_BIN (make test sets it); the page tests need Debian's chromium and are skipped,
saying so, without it. The offline/CSP test needs no browser.
"""
import base64
import collections
import hashlib
import json
import math
import os
import re
import shutil
import subprocess
from html.parser import HTMLParser

import numpy as np
import pytest

from flexcheck import add_tested, read_case
from _flexcli import BIN, run

CHROMIUM = shutil.which("chromium")
needs_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (Debian package chromium): "
    "report.html cannot be rendered, its charts and table sort are not checked")

# No '/' in a case name (HDF5 separates path components with it); the producer may hold any text.
EVIL_CASE = "<script>x='1\"'<"
AMP_CASE = "q\"&amp;'"  # the literal text &amp;: must not come out as "&"
EVIL_PRODUCER = '</td><script>document.body.setAttribute("data-pwned","1")</script>'
H1 = 3  # index of H1 in the gates string (H6 H3 H4 H1 H2 H5 H7, docs/tolerance.md)
VERDICT_WORD = {"fail": "FAIL", "error": "ERROR", "outside-contract": "OUTSIDE", "skip": "skipped",
                "pass": "pass"}
RANK = {"fail": 0, "error": 1, "outside-contract": 2, "skip": 3, "pass": 4}


def gen(path, name, *args):
    rc, text, err = run(BIN, "gen", "--case", "--out", str(path), "--name", name, "--hq", "2",
                        "--d", "16", *args)
    assert rc == 0, text + err
    return str(path)


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    """(directory, rows of rows.json) of a check run over the generated cases."""
    if not BIN:
        pytest.skip("FLEXCHECK_BIN is not set (make test sets it)")
    d = tmp_path_factory.mktemp("html")
    win = ("--lq", "32", "--causal", "--dtype", "float16")
    a = gen(d / "a.h5", EVIL_CASE, *win, "--window", "8")
    # The same inputs with window 9: its oracle is a producer that is off by one in the window,
    # a failure the diagnosis names.
    w9 = read_case(gen(d / "a9.h5", EVIL_CASE, *win, "--window", "9"), EVIL_CASE)
    os.remove(d / "a9.h5")
    c = read_case(a, EVIL_CASE)
    add_tested(a, EVIL_CASE, "good", c.out.astype(np.float16), producer=EVIL_PRODUCER,
               lse=c.lse.astype(np.float32))
    add_tested(a, EVIL_CASE, "shifted", w9.out.astype(np.float16), producer="window 9",
               lse=w9.lse.astype(np.float32))
    b = gen(d / "b.h5", "w9", "--lq", "48", "--causal", "--dtype", "float16", "--window", "9")
    c = read_case(b, "w9")
    add_tested(b, "w9", "good", c.out.astype(np.float16), producer="p",
               lse=c.lse.astype(np.float32))
    # Scores around -1e9, past what float32 resolves: no baseline holds the rows, outside the
    # contract.
    o = gen(d / "o.h5", "big", "--lq", "32", "--causal", "--score-offset", "-1e9", "--dtype",
            "float16")
    c = read_case(o, "big")
    add_tested(o, "big", "eng", c.out.astype(np.float16), producer="p",
               lse=c.lse.astype(np.float32))
    f = gen(d / "f.h5", AMP_CASE, "--lq", "24", "--dtype", "float32")
    c = read_case(f, AMP_CASE)
    add_tested(f, AMP_CASE, "good", c.out.astype(np.float32), producer="p&amp;q",
               lse=c.lse.astype(np.float32))
    rep = d / "rep"
    rc, text, err = run(BIN, "check", a, b, o, f, "--report", rep)
    assert rc == 1, text + err  # the shifted output fails
    with open(rep / "rows.json", encoding="utf-8") as fh:
        rows = json.load(fh)["rows"]
    outcomes = collections.Counter(r["outcome"] for r in rows)
    # The report this test needs: without these rows its checks would prove less.
    assert outcomes["fail"] >= 1 and outcomes["outside-contract"] >= 1, outcomes
    assert outcomes["pass"] >= 3, outcomes
    assert any(r["explained"] for r in rows if r["outcome"] == "fail"), rows
    return rep, rows


def label(r):
    return r["backend"] + (f" kernel {r['kernel']}" if r["kernel"] > 0 else "")


def measured(r, by_window):
    """A row the error charts show: judged, measured against the baseline (H1 ran)."""
    return (r["outcome"] in ("pass", "fail") and r["gates"][H1] != "-"
            and (not by_window or r["window"] > 0))


def written_order(rows):
    """The rows as the page writes them: failed, error, outside, skipped, passed, each in run
    order."""
    return sorted(rows, key=lambda r: RANK[r["outcome"]])


def metric(v):
    """rows.json's number: null is a missing value, "inf"/"-inf" infinities."""
    if v is None:
        return math.nan
    return float(v)


class Dom(HTMLParser):
    """What the checks read from a page: each svg's markers (<g class="pt ...">, its classes
    and title), the rows table's header and body cells as text, script elements, body
    attributes, whether #sort-hint is hidden, and #probe's text."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.svgs, self.heads, self.rows = {}, [], []
        self.scripts, self.body, self.hint_hidden, self.probe = 0, {}, None, None
        self._svg = self._marker = self._cell = None
        self._title = self._table = self._in_probe = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if a.get("id") == "sort-hint":
            self.hint_hidden = "hidden" in a
        if tag == "svg":
            self._svg = a.get("id")
            self.svgs[self._svg] = []
        elif tag == "g" and self._svg is not None and "pt" in (a.get("class") or "").split():
            self._marker = {"class": set(a["class"].split()), "title": ""}
        elif tag == "title" and self._marker is not None:
            self._title = True
        elif tag == "table" and a.get("id") == "rows-table":
            self._table = True
        elif tag == "tr" and self._table:
            self.rows.append([])
        elif tag in ("td", "th") and self._table:
            self._cell = ""
        elif tag == "script":
            self.scripts += 1
        elif tag == "body":
            self.body = a
        elif a.get("id") == "probe":
            self._in_probe, self.probe = True, ""

    def handle_endtag(self, tag):
        if tag == "svg":
            self._svg = None
        elif tag == "g" and self._marker is not None:
            self.svgs[self._svg].append(self._marker)
            self._marker = None
        elif tag == "title":
            self._title = False
        elif tag == "table":
            self._table = False
        elif tag in ("td", "th") and self._cell is not None:
            self.rows[-1].append(self._cell)
            self._cell = None
        elif tag == "pre":
            self._in_probe = False

    def handle_data(self, data):
        if self._title and self._marker is not None:
            self._marker["title"] += data
        if self._cell is not None:
            self._cell += data
        if self._in_probe:
            self.probe += data


def dump_dom(tmp_path, page):
    """The DOM of page after its scripts ran, serialized by headless Chromium."""
    profile = tmp_path / "chromium-profile"  # its own: other runs may hold the default one
    p = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
                        f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
                       capture_output=True, text=True, timeout=180)
    assert p.returncode == 0, p.stderr[-2000:]
    assert "</html>" in p.stdout, p.stderr[-2000:]
    dom = Dom(p.stdout)
    dom.heads, dom.rows = (dom.rows[0], dom.rows[1:]) if dom.rows else ([], [])
    return dom


MARKER_TITLE = re.compile(r"^(?P<case>.*), (?P<builder>[^,]*), (?P<dtype>\S+) (?P<backend>.*): "
                          r"(?P<axis>Lk|W) (?P<x>\d+), max\|err\| (?P<err>\S+), (?P<outcome>\S+)$")


def test_the_page_loads_nothing_and_runs_only_its_own_script(report):
    rep, _ = report
    text = (rep / "report.html").read_text(encoding="utf-8")
    for fetch in ("src=", "href=", "url(", "@import", "<link", "<iframe", "<object"):
        assert fetch not in text, f"report.html would fetch something: {fetch}"
    scripts = re.findall(r"<script>(.*?)</script>", text, re.S)
    assert len(scripts) == 1, f"{len(scripts)} inline scripts"
    csp = re.search(r'<meta http-equiv="Content-Security-Policy" content="([^"]*)">', text)
    assert csp, "no Content-Security-Policy"
    digest = base64.b64encode(hashlib.sha256(scripts[0].encode()).digest()).decode()
    # The script's hash, computed here: a changed script whose hash was not updated would be
    # blocked by the page's own policy.
    assert f"script-src 'sha256-{digest}'" in csp.group(1), (digest, csp.group(1))
    assert "default-src 'none'" in csp.group(1)
    assert "unsafe-inline" not in csp.group(1).split("script-src")[1], csp.group(1)


@needs_chromium
def test_charts_and_rows_table_after_load(report, tmp_path):
    rep, rows = report
    dom = dump_dom(tmp_path, rep / "report.html")

    # No row string became markup: the injected script never ran, the page keeps one script.
    assert "data-pwned" not in dom.body, dom.body
    assert dom.scripts == 1, dom.scripts
    # The page's own script ran under its policy: it shows the sort hint.
    assert dom.hint_hidden is False, "the sort script did not run (#sort-hint still hidden)"

    assert "chart-h1" in dom.svgs, sorted(dom.svgs)
    for chart, axis, by_window in (("chart-lk", "lk", False), ("chart-w", "window", True)):
        assert chart in dom.svgs, f"{chart} missing: {sorted(dom.svgs)}"
        want = collections.Counter((r["case_id"], label(r), r[axis], r["outcome"])
                                   for r in rows if measured(r, by_window))
        assert sum(want.values()) >= (3 if by_window else 4), want
        got = collections.Counter()
        for m in dom.svgs[chart]:
            t = MARKER_TITLE.match(m["title"])
            assert t, f"{chart}: marker title {m['title']!r}"
            got[(t["case"], t["backend"], int(t["x"]), t["outcome"])] += 1
            assert ("fail" in m["class"]) == (t["outcome"] != "pass"), m
        assert got == want, f"{chart}: markers {got} != rows {want}"

    # The table: every row once, in the written order, each string as it was.
    assert dom.heads[:3] == ["#", "verdict", "case"], dom.heads
    col = {h: i for i, h in enumerate(dom.heads)}
    order = written_order(rows)
    assert len(dom.rows) == len(order), (len(dom.rows), len(order))
    assert [r["outcome"] for r in order][:2] == ["fail", "outside-contract"]
    for k, (cells, r) in enumerate(zip(dom.rows, order)):
        where = f"table row {k + 1} ({r['case_id']!r}, {label(r)})"
        assert cells[col["#"]] == str(k + 1), where
        assert cells[col["case"]] == r["case_id"], (where, cells[col["case"]])
        assert cells[col["backend"]] == label(r) + r["producer"], (where, cells[col["backend"]])
        assert cells[col["verdict"]].startswith(VERDICT_WORD[r["outcome"]]), where
        why = cells[col["reason and diagnosis"]]
        if r["outcome"] != "pass":
            assert r["reason"] in why, (where, why)
        if r["explained"]:
            assert "diagnosis: " + r["explained"] in why, (where, why)


# Appended to a copy of the page (its policy extended by this script's hash): clicks headers
# the way a reader does and records the order of the # column after each click.
PROBE = """
(function () {
  function order() {
    return Array.prototype.map.call(document.querySelectorAll('#rows-table tbody tr'),
                                    function (tr) { return Number(tr.cells[0].textContent); });
  }
  function click(name) {
    var ths = document.querySelectorAll('#rows-table thead th');
    for (var i = 0; i < ths.length; i++) if (ths[i].textContent === name) ths[i].click();
  }
  var out = {start: order()};
  click('max|err|'); out.err_up = order();
  click('max|err|'); out.err_down = order();
  click('case'); out.case_up = order();
  click('verdict'); click('verdict'); out.verdict_down = order();
  click('#'); out.back = order();
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


@needs_chromium
def test_clicking_a_header_sorts_the_rows(report, tmp_path):
    rep, rows = report
    text = (rep / "report.html").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(PROBE.encode()).digest()).decode()
    text, n = re.subn(r"script-src ('sha256-[^']*')", rf"script-src \1 'sha256-{digest}'", text)
    assert n == 1
    assert text.count("</body>") == 1
    text = text.replace("</body>", f"<script>{PROBE}</script>\n</body>")
    page = tmp_path / "probe.html"
    page.write_text(text, encoding="utf-8")
    dom = dump_dom(tmp_path, page)
    assert dom.probe, "the probe did not run"
    got = json.loads(dom.probe)

    # What each click must give, from rows.json: # is the written position; a missing number
    # sorts last in both directions, ties keep the # order.
    order = written_order(rows)
    pos = {id(r): k + 1 for k, r in enumerate(order)}
    err = {id(r): metric(r["max_err"]) for r in order}

    def by(key, reverse=False):
        def k(r):
            v = key(r)
            missing = isinstance(v, float) and math.isnan(v)
            return (missing, 0 if missing else (-v if reverse else v), pos[id(r)])
        return [pos[id(r)] for r in sorted(order, key=k)]

    n = len(order)
    assert got["start"] == list(range(1, n + 1)), got["start"]
    assert got["err_up"] == by(lambda r: err[id(r)]), got
    assert got["err_down"] == by(lambda r: err[id(r)], reverse=True), got
    assert got["err_up"] != got["start"], "max|err| order equals the written one: proves nothing"
    assert got["case_up"] == [pos[id(r)] for r in sorted(order, key=lambda r: (r["case_id"],
                                                                                 pos[id(r)]))]
    assert got["verdict_down"] == by(lambda r: float(RANK[r["outcome"]]), reverse=True), got
    assert got["back"] == list(range(1, n + 1)), got


@pytest.mark.parametrize("tiny, huge", [(5e-324, 1.7e308), (2e-310, 1e305)])
def test_extreme_errors_keep_the_log_axes_sane(report, tmp_path, tiny, huge):
    """A merged rows.json may hold a denormal or near-overflow max|err| (it is read as hostile,
    but these are valid numbers): the axes must still run between finite, nonzero decades,
    every tick label a number in the double range, and each row keep its marker."""
    rep, rows = report
    d = tmp_path / "in"
    shutil.copytree(rep, d)
    with open(d / "rows.json", encoding="utf-8") as fh:
        doc = json.load(fh)
    charted = [r for r in doc["rows"] if measured(r, False)]
    charted[0]["max_err"], charted[-1]["max_err"] = tiny, huge
    with open(d / "rows.json", "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    rc, text, err = run(BIN, "report", "merge", d, "--out", tmp_path / "out")
    assert rc in (0, 1), text + err
    page = (tmp_path / "out" / "report.html").read_text(encoding="utf-8")
    svg = re.search(r'<svg[^>]*id="chart-lk".*?</svg>', page, re.S).group(0)
    labels = re.findall(r'<text [^>]*text-anchor="(?:end|middle)"[^>]*>([0-9e-]+)</text>', svg)
    assert labels.count("0") == 1, labels  # the label of the band for 0, below the axis
    labels.remove("0")
    assert labels, svg[:2000]
    for lab in labels:
        v = float(lab)
        assert 1e-300 <= v <= 1e300, f"tick label {lab} in:\n{svg[:3000]}"
    assert len(labels) < 60, labels
    assert svg.count('class="pt ') == len(charted)


# ---- H1 ratio against Lk ---------------------------------------------------------------------

FAMILIES = ("packed", "chunked", "sliding", "bidir window", "causal", "none")


def family(r):
    """The first that holds (docs/tolerance.md "Report"); soft-cap and sinks are no family."""
    if r["nseq"] >= 2:
        return "packed"
    if r["chunk"] > 0:
        return "chunked"
    if r["window"] > 0:
        return "sliding" if r["causal"] else "bidir window"
    return "causal" if r["causal"] else "none"


def bucket_label(lk):
    """Power-of-two buckets: 0, 1, 2-3, 4-7, ..., by the bit length of Lk."""
    b = int(lk).bit_length()
    return str(b) if b <= 1 else f"{2 ** (b - 1)}-{2 ** b - 1}"


def ratio_of(r):
    v = metric(r["h1_ratio"])
    return math.inf if math.isnan(v) else v


def num(x):
    """rep_fmt_num: %.3g, inf, - for a missing value."""
    return "-" if math.isnan(x) else ("inf" if x == math.inf else f"{x:.3g}")


@pytest.fixture(scope="module")
def varied(report, tmp_path_factory):
    """A report merged from the check run's rows.json with planted rows of every family, Lk 0
    to 2^28 and ratios 0 to inf (passed <= 1, failed above), so the panels have something to
    place: (directory, rows of its rows.json)."""
    rep, rows = report
    d = tmp_path_factory.mktemp("varied")
    with open(rep / "rows.json", encoding="utf-8") as fh:
        doc = json.load(fh)
    base = next(r for r in doc["rows"] if r["outcome"] == "pass" and r["gates"][H1] == "P")
    lks = [0, 1, 2, 3, 5, 17, 300, 1000, 4096, 70000, 131072, 262143, 2 ** 20, 2 ** 28]
    shapes = [(1, 0, 0, 1), (0, 0, 0, 1), (1, 64, 0, 1), (0, 64, 0, 1), (1, 16, 128, 1),
              (1, 0, 32, 3), (0, 8, 0, 2)]  # (causal, window, chunk, nseq)
    ratios = [0.0, 1e-3, 0.02, 0.3, 0.999, 1.0]
    planted = []
    for i, lk in enumerate(lks):
        for j, (causal, window, chunk, nseq) in enumerate(shapes):
            if (i + j) % 3:
                continue
            r = dict(base, case_id=f"v-{i}-{j}", lk=lk, causal=causal, window=window,
                     chunk=chunk, nseq=nseq, b=1, empty_rows=0,
                     h1_ratio=ratios[(i * 7 + j) % len(ratios)])
            if (i + 2 * j) % 5 == 0:  # a failed H1: a ratio above 1, some of them x/0
                g = list(r["gates"])
                g[H1] = "F"
                r.update(outcome="fail", first_fail="H1", gates="".join(g), reason="planted",
                         h1_ratio="inf" if i % 2 else 1.5 * (i + 1))
            planted.append(r)
    doc["rows"] += planted
    c = collections.Counter(r["outcome"] for r in doc["rows"])
    doc.update(rows_total=len(doc["rows"]), **{k: c[v] for k, v in (
        ("pass", "pass"), ("fail", "fail"), ("error", "error"), ("skip", "skip"),
        ("outside", "outside-contract"))})
    (d / "in").mkdir()
    with open(d / "in" / "rows.json", "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    rc, text, err = run(BIN, "report", "merge", d / "in", "--out", d / "out")
    assert rc == 1, text + err  # failed rows
    with open(d / "out" / "rows.json", encoding="utf-8") as fh:
        return d / "out", json.load(fh)["rows"]


def expected_h1_lk_section(rows):
    """summary.md's "H1 ratio against Lk" groups, recomputed from rows.json: per dtype and
    backend, a line per Lk bucket, a column per family present, median / max (rows)."""
    dtypes = {"float32": 0, "float16": 1, "bfloat16": 2}
    groups = sorted({(r["dtype"], label(r)) for r in rows}, key=lambda g: (dtypes[g[0]], g[1]))
    out = []
    for dt, lab in groups:
        out.append(f"### {dt}/{lab}\n\n")
        mine = [r for r in rows if (r["dtype"], label(r)) == (dt, lab) and measured(r, False)]
        if not mine:
            out.append("No row where H1 ran.\n\n")
            continue
        cells = collections.defaultdict(list)
        for r in mine:
            cells[(int(r["lk"]).bit_length(), family(r))].append(ratio_of(r))
        fams = [f for f in FAMILIES if any(k[1] == f for k in cells)]
        out.append("| Lk | " + " | ".join(fams) + " |\n|---:|" + "---:|" * len(fams) + "\n")
        for b in sorted({k[0] for k in cells}):
            line = [bucket_label(0 if b == 0 else 2 ** (b - 1))]
            for f in fams:
                v = sorted(cells.get((b, f), []))
                n = len(v)
                med = (v[n // 2] if n % 2 else (v[n // 2 - 1] + v[n // 2]) / 2) if n else 0
                line.append(f"{num(med)} / {num(v[-1])} ({n})" if n else "-")
            out.append("| " + " | ".join(line) + " |\n")
        out.append("\n")
    return "".join(out)


@pytest.mark.parametrize("which", ["check", "varied"])
def test_h1_against_lk_table_recomputed_from_rows_json(report, varied, which):
    rep, rows = report if which == "check" else varied
    text = (rep / "summary.md").read_text(encoding="utf-8")
    sec = text.split("## H1 ratio against Lk\n\n", 1)[1].split("\n## ", 1)[0]
    body = sec.split("\n\n", 1)[1]  # past the sentence that opens the section
    assert body.rstrip("\n") == expected_h1_lk_section(rows).rstrip("\n"), body
    if which == "varied":  # the planted rows reach every family and both ends
        assert all(f"| {f} |" in body or f" {f} |" in body for f in FAMILIES), body
        assert "| 0 |" in body and "| 268435456-536870911 |" in body, body


# Appended to a copy of the page: where every tick label and marker of each H1-against-Lk panel
# is drawn, as Chromium lays them out.
PLACES = """
(function () {
  function mid(el) {
    var b = el.getBoundingClientRect();
    return [(b.left + b.right) / 2, (b.top + b.bottom) / 2];
  }
  var out = {};
  document.querySelectorAll('svg[id^="chart-h1lk-"]').forEach(function (svg) {
    var p = {x: [], y: [], pts: []};
    svg.querySelectorAll('text.xt').forEach(function (t) {
      p.x.push([t.textContent, mid(t)[0]]);
    });
    svg.querySelectorAll('text[text-anchor="end"]').forEach(function (t) {
      p.y.push([t.textContent, mid(t)[1]]);
    });
    svg.querySelectorAll('g.pt').forEach(function (g) {
      var m = mid(g.querySelector('circle:not([fill="none"]), rect, path'));
      p.pts.push([g.querySelector('title').textContent, g.getAttribute('class'), m[0], m[1]]);
    });
    out[svg.id] = p;
  });
  var pre = document.createElement('pre');
  pre.id = 'probe';
  pre.textContent = JSON.stringify(out);
  document.body.appendChild(pre);
})();
"""


def probe_page(tmp_path, rep, script):
    """dump_dom of a copy of rep's report.html with script appended (the policy extended by its
    hash)."""
    text = (rep / "report.html").read_text(encoding="utf-8")
    digest = base64.b64encode(hashlib.sha256(script.encode()).digest()).decode()
    text, n = re.subn(r"script-src ('sha256-[^']*')", rf"script-src \1 'sha256-{digest}'", text)
    assert n == 1
    text = text.replace("</body>", f"<script>{script}</script>\n</body>")
    page = tmp_path / "probe.html"
    page.write_text(text, encoding="utf-8")
    dom = dump_dom(tmp_path, page)
    assert dom.probe, "the probe did not run"
    return json.loads(dom.probe)


def between(v, ticks, what):
    """The screen coordinate of value v on a log axis, interpolated between the two rendered
    tick labels around it (ticks: [(value, coordinate)], ascending by value)."""
    below = [t for t in ticks if t[0] <= v]
    above = [t for t in ticks if t[0] >= v]
    assert below and above, f"{what}: {v} outside the labelled axis {ticks}"
    (v0, c0), (v1, c1) = below[-1], above[0]
    if v0 == v1:
        return c0, c0, c0
    t = (math.log(v) - math.log(v0)) / (math.log(v1) - math.log(v0))
    return c0 + t * (c1 - c0), min(c0, c1), max(c0, c1)


@needs_chromium
def test_h1_against_lk_markers_stand_where_their_lk_and_ratio_fall(varied, tmp_path):
    rep, rows = varied
    got = probe_page(tmp_path, rep, PLACES)
    by_id = {(r["case_id"], r["dtype"], label(r)): r for r in rows if measured(r, False)}
    dtypes = {"float32": 0, "float16": 1, "bfloat16": 2}
    groups = sorted({(r["dtype"], label(r)) for r in rows}, key=lambda g: (dtypes[g[0]], g[1]))
    seen, xaxes = 0, []
    for k, (dt, lab) in enumerate(groups):
        mine = [r for r in by_id.values() if (r["dtype"], label(r)) == (dt, lab)]
        if not mine:
            assert f"chart-h1lk-{k}" not in got
            continue
        p = got[f"chart-h1lk-{k}"]
        xs = [(float(t), c) for t, c in p["x"] if t != "0"]
        zero_x = [c for t, c in p["x"] if t == "0"]
        ys = sorted(((float(t), c) for t, c in p["y"] if t not in ("0", "inf")))
        band0 = [c for t, c in p["y"] if t == "0"]
        band_inf = [c for t, c in p["y"] if t == "inf"]
        assert len(xs) >= 2 and len(ys) >= 2 and zero_x and band0 and band_inf, p
        xaxes.append([t for t, _ in p["x"]])
        assert len(p["pts"]) == len(mine), (dt, lab, len(p["pts"]), len(mine))
        for title, cls, cx, cy in p["pts"]:
            case = title.split(", ", 1)[0]
            r = by_id[(case, dt, lab)]
            lk, ratio = int(r["lk"]), ratio_of(r)
            where = f"{dt}/{lab} {case}: Lk {lk}, ratio {ratio}"
            assert ("fail" in cls.split()) == (r["outcome"] == "fail"), where
            assert f"fam-{family(r).split()[0]}" in cls.split(), (where, cls)
            assert ("edge" in cls.split()) == (lk == 0 or ratio in (0, math.inf)), (where, cls)
            if lk == 0:  # in the band left of the axis, under its label "0"
                assert abs(cx - zero_x[0]) < 3 and cx < xs[0][1], where
            else:
                want, lo, hi = between(lk, xs, where)
                assert lo - 3 <= cx <= hi + 3 and abs(cx - want) < 3, (where, cx, want)
            if ratio == 0:
                assert abs(cy - band0[0]) < 6 and cy > ys[0][1], where
            elif ratio == math.inf:
                assert abs(cy - band_inf[0]) < 6 and cy < ys[-1][1], where
            else:  # y grows downwards: the smaller ratio has the larger coordinate
                want, lo, hi = between(ratio, ys, where)
                assert lo - 3 <= cy <= hi + 3 and abs(cy - want) < 3, (where, cy, want)
            seen += 1
    assert seen == len(by_id), (seen, len(by_id))
    assert xaxes and all(a == xaxes[0] for a in xaxes), f"panels with different Lk axes {xaxes}"
    assert 8 <= len(xaxes[0]) <= 12, xaxes[0]  # about ten labels, 1 .. 2^28 plus the 0 band


def test_a_packed_rows_nseq_and_family(tmp_path):
    """judge_row_problem records the sequences per batch entry: a packed case's row says
    nseq 3 (B 1) and sits in the packed column, a dense one's nseq 1."""
    if not BIN:
        pytest.skip("FLEXCHECK_BIN is not set (make test sets it)")
    p = gen(tmp_path / "p.h5", "pk", "--packed", "0,5,17,40", "--causal", "--dtype", "float32")
    c = read_case(p, "pk")
    add_tested(p, "pk", "good", c.out.astype(np.float32), producer="p",
               lse=c.lse.astype(np.float32))
    d = gen(tmp_path / "d.h5", "dn", "--lq", "24", "--b", "2", "--dtype", "float32")
    c = read_case(d, "dn")
    add_tested(d, "dn", "good", c.out.astype(np.float32), producer="p",
               lse=c.lse.astype(np.float32))
    rc, text, err = run(BIN, "check", p, d, "--report", tmp_path / "rep")
    assert rc == 0, text + err
    with open(tmp_path / "rep" / "rows.json", encoding="utf-8") as fh:
        rows = json.load(fh)["rows"]
    got = {r["case_id"].split(":")[-1]: (r["nseq"], r["b"], family(r)) for r in rows}
    assert got == {"pk": (3, 1, "packed"), "dn": (1, 2, "none")}, got
    md = (tmp_path / "rep" / "summary.md").read_text(encoding="utf-8")
    assert "| Lk | packed | none |" in md, md
    line = next(x for x in md.splitlines() if x.startswith("| 32-63 |"))  # Lk 40: packed
    assert line.endswith("(1) | - |"), line

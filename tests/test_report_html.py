"""The check report as an HTML page (flinkstate.report_html, ``check --format html``, ``check-report.html``): real
reports of one of Flink's own savepoints (tests/corpus: the State Processor API's ``table-state``, with POJO, Avro,
MAP, LIST and timer state), checked against a new version that changes a POJO field's type, adds one, changes a MAP
state's value type through a migration function that fails on some entries, and leaves a LIST state out. The page's
values are read back from its tables and compared with the JSON report it was rendered from; operator uids replaced
by hostile ones (markup, a ``javascript:`` link text, escape sequences, a bidi override) must leave the page's
elements and attributes exactly those of the same report with plain names. No cluster."""

from __future__ import annotations

import ast
import json
import shutil
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
import yaml

import flinkstate.cli
import flinkstate.report_html
from flinkstate import ReportFormatError, render_html
from flinkstate.compatibility import Verdict
from flinkstate.errors import printable
from flinkstate.finding_codes import FINDING_CODES
from flinkstate.format.metadata import read_metadata, write_metadata
from flinkstate.report import VERDICT_WORDS

pytestmark = pytest.mark.corpus

ROOT = Path(__file__).resolve().parent.parent
TABLE_STATE = (ROOT / "tests" / "corpus" / "savepoints" / "flink-libraries" / "flink-state-processing-api" / "src"
               / "test" / "resources" / "table-state")
KEYED, TIMERS_ONLY = "keyed-state-process-uid", "keyed-broadcast-process-uid"
#: Markup that would run (a script, an image's handler), a quote that would end an attribute, a link's text.
HOSTILE_MARKUP = '<script>alert(1)</script>"><img src=x onerror=alert(2)> javascript:alert(3)'
#: A terminal escape (red), a bell, and a right-to-left override that would show "exe.txt" as "txt.exe".
HOSTILE_CONTROL = "ops\x1b[31m red\x07 \u202etxt.exe"
#: The migration function of the MAP state: fails on values above 7, with markup in its error.
FIXES = ("def odd(value):\n"
         "    if value > 7:\n"
         "        raise ValueError(f'<b>too big</b> {value}')\n"
         "    return str(value)\n")


@dataclass
class Reports:
    """One check of the savepoint (plain names) and one of its copy with hostile uids, in JSON and HTML."""

    source: Path
    v1: Path
    v2: Path
    plain: dict[str, Any]
    plain_page: str
    hostile: dict[str, Any]
    hostile_page: str


def copy_source(target: Path, uids: dict[str, str]) -> Path:
    """A copy of the savepoint, its operators' uids replaced as ``uids`` says."""
    shutil.copytree(TABLE_STATE, target)
    metadata = read_metadata((target / "_metadata").read_bytes())
    for op in metadata.operators:
        if op.uid in uids:
            op.uid = uids[op.uid]
    (target / "_metadata").write_bytes(write_metadata(metadata))
    return target


def new_version(v1: Path, target: Path, keyed: str) -> Path:
    """The new version: the POJO's privateLong becomes a String (converted) and gains a label; the MAP state's
    values become Strings through the migration function (failing entries dead-lettered); the LIST state is left
    out."""
    data = yaml.safe_load(v1.read_text())
    states = data["operators"][keyed]["states"]
    states["KeyedPojoValue"]["value"]["fields"].update(privateLong="String", label="String")
    states["KeyedPojoValue"]["migration"] = {"fields": {"privateLong": {"convert": "to-string"},
                                                        "label": {"default": "migrated"}}}
    states["KeyedPrimitiveValueMap"]["value"] = "String"
    states["KeyedPrimitiveValueMap"]["migration"] = {"function": "report_html_fixes:odd", "on_error": "dead-letter"}
    del states["KeyedPrimitiveValueList"]
    target.write_text(yaml.safe_dump(data, sort_keys=False))
    return target


def cli(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    code = flinkstate.cli.main(list(args))
    out, err = capsys.readouterr()
    return code, out, err


def check_args(source: Path, v2: Path, *more: str) -> list[str]:
    return ["check", str(source), "--schema", str(v2), "--dry-run", "--allow-code=report_html_fixes",
            "--max-dead-letters", "5", *more]


@contextmanager
def migration_function_importable(folder: Path) -> Iterator[None]:
    """The MAP state's migration function, as module ``report_html_fixes`` in ``folder``, on the import path."""
    (folder / "report_html_fixes.py").write_text(FIXES)
    sys.path.insert(0, str(folder))
    try:
        yield
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop("report_html_fixes", None)


@pytest.fixture(scope="module")
def fixes_module(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("fixes")
    with migration_function_importable(folder):
        yield folder


def build_reports(folder: Path) -> Reports:
    """Both checks through the CLI (``--format json -o``), each page rendered from its JSON. The migration
    function's module must be importable (:func:`fixes_module`)."""
    pages: dict[str, tuple[dict[str, Any], str]] = {}
    for name, uids in (("plain", {}), ("hostile", {KEYED: HOSTILE_MARKUP, TIMERS_ONLY: HOSTILE_CONTROL})):
        source = copy_source(folder / name / "savepoint", uids)
        v1 = folder / name / "v1.yaml"
        assert flinkstate.cli.main(["schema", str(source), "-o", str(v1)]) == 0
        v2 = new_version(v1, folder / name / "v2.yaml", uids.get(KEYED, KEYED))
        output = folder / name / "check-report.json"
        assert flinkstate.cli.main(check_args(source, v2, "--format", "json", "-o", str(output))) == 3
        report = json.loads(output.read_text())
        pages[name] = (report, render_html(report))
    plain = folder / "plain"
    return Reports(plain / "savepoint", plain / "v1.yaml", plain / "v2.yaml", *pages["plain"], *pages["hostile"])


@pytest.fixture(scope="module")
def reports(tmp_path_factory: pytest.TempPathFactory, fixes_module: Path) -> Reports:
    return build_reports(tmp_path_factory.mktemp("reports"))


# -- reading the page back --------------------------------------------------------------------------------------


class Page(HTMLParser):
    """The page as the tests read it: every start tag with its attributes, in order; the text; and each table (by
    its class) as rows of cells, each cell's text and the text of the ``<del>`` and ``<ins>`` marks in it."""

    def __init__(self, html: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, tuple[tuple[str, str | None], ...]]] = []
        self.text: list[str] = []
        self.tables: dict[str, list[list[Cell]]] = {}
        self.classes: dict[str, list[str]] = {}  # tag.class -> texts of such elements
        self._table: str | None = None
        self._cell: Cell | None = None
        self._marks: list[str] = []
        self._open: list[tuple[str, str]] = []
        self.feed(html)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, tuple(attrs)))
        cls = dict(attrs).get("class") or ""
        if tag == "table":
            self._table = cls
            self.tables.setdefault(cls, [])
        elif tag == "tr" and self._table is not None:
            self.tables[self._table].append([])
        elif tag in ("td", "th") and self._table is not None:
            self._cell = Cell(classes=cls)
            self.tables[self._table][-1].append(self._cell)
        elif tag in ("del", "ins") and self._cell is not None:
            self._marks.append(tag)
            self._cell.marks(tag).append("")
        if tag in ("h1", "p", "li", "code", "div", "span", "title"):
            self._open.append((tag, cls))
            self.classes.setdefault(f"{tag}.{cls}", []).append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table = None
        elif tag in ("td", "th"):
            self._cell = None
        elif tag in ("del", "ins") and self._marks:
            self._marks.pop()
        if self._open and self._open[-1][0] == tag:
            self._open.pop()

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.text += data
            if self._marks:
                self._cell.marks(self._marks[-1])[-1] += data
        for tag, cls in self._open:
            self.classes[f"{tag}.{cls}"][-1] += data


@dataclass
class Cell:
    classes: str = ""
    text: str = ""
    #: the texts the cell marks as only in the savepoint (<del>) and only in the new version (<ins>)
    del_: list[str] = field(default_factory=list)
    ins: list[str] = field(default_factory=list)

    def marks(self, tag: str) -> list[str]:
        return self.del_ if tag == "del" else self.ins


def body_rows(page: Page, table: str) -> list[list[Cell]]:
    rows = page.tables[table]
    assert rows and all(cell.classes == "" for cell in rows[0]), f"table {table} has no header row"
    return rows[1:]


def types_text(types: dict[str, str]) -> str:
    if set(types) == {"value"}:
        return printable(types["value"])
    return "\n".join(f"{k}: {printable(v)}" for k, v in types.items())


def verdict_class(name: str) -> str:
    return "verdict v-" + {"COMPATIBLE_AS_IS": "as-is", "COMPATIBLE_WITH_RECONFIGURED_SERIALIZER": "reconfigured",
                           "COMPATIBLE_AFTER_MIGRATION": "after-migration", "INCOMPATIBLE": "incompatible"}[name]


def words(name: str) -> str:
    return VERDICT_WORDS[Verdict[name]]


# -- the values on the page -------------------------------------------------------------------------------------


def test_the_page_shows_the_reports_head_and_both_verdicts(reports: Reports) -> None:
    page, report = Page(reports.plain_page), reports.plain
    assert report["outcome"] == "migrate" and report["flink_verdict"] == "INCOMPATIBLE"
    assert page.classes["h1.outcome-migrate"] == ["Compatibility check: migration required and possible"]
    summary = {row[0].text: row[1].text for row in page.tables["summary"]}
    assert summary == {"savepoint": report["savepoint"], "new version's state schema": f"the manifest {reports.v2}",
                       "state backend": "any", "allowNonRestoredState": "no"}
    head, values = page.tables["verdicts"]
    assert [c.text for c in head] == ["Flink on its own, restoring the savepoint as it is",
                                      "flinkstate: the plan flinkstate migrate runs"]
    assert [(c.text, c.classes) for c in values] == [("INCOMPATIBLE", "verdict v-incompatible"),
                                                     ("after migration", "verdict v-after-migration")]


def test_each_state_shows_its_types_side_by_side_its_verdicts_and_migration(reports: Reports) -> None:
    page, report = Page(reports.plain_page), reports.plain
    rows = body_rows(page, "states")
    assert len(rows) == len(report["states"]) == 13  # 12 keyed states and the source's SourceReaderState
    for cells, state in zip(rows, report["states"], strict=True):
        kept = state["status"] == "not-declared"
        expected_from = "savepoint" if kept else "manifest" if state["new_types"] else "—"
        assert [c.text for c in cells] == [
            state["operator"], state["state"] or "—", state["kind"] or state["old_kind"] or "", state["status"],
            expected_from, types_text(state["old_types"]),
            "as written (kept)" if kept else types_text(state["new_types"]),
            words(state["flink_verdict"]), words(state["verdict"]), state["migration"] or ""], state
        assert (cells[7].classes, cells[8].classes) == (verdict_class(state["flink_verdict"]),
                                                        verdict_class(state["verdict"]))
    by_state = {(cells[0].text, cells[1].text): cells for cells in rows}
    pojo = by_state[KEYED, "KeyedPojoValue"]
    # old: {privateLong: Long, publicLong: Long}; new: {label: String, privateLong: String, publicLong: Long}
    assert (pojo[5].del_, pojo[5].ins) == (["Long"], [])
    assert (pojo[6].del_, pojo[6].ins) == ([], ["label: String, ", "String"])
    assert pojo[9].text == "values rewritten by flinkstate"
    mapped = by_state[KEYED, "KeyedPrimitiveValueMap"]
    assert (mapped[5].text, mapped[6].text) == ("user_key: String\nvalue: Long", "user_key: String\nvalue: String")
    assert (mapped[5].del_, mapped[6].ins) == (["Long"], ["String"])
    unchanged = by_state[KEYED, "KeyedGenericAvroValue"]
    assert unchanged[5].del_ == unchanged[6].ins == []


def test_each_finding_shows_its_code_explained_where_its_verdict_and_what_changed(reports: Reports) -> None:
    page, report = Page(reports.plain_page), reports.plain
    rows = body_rows(page, "findings")
    assert [c.text for c in page.tables["findings"][0]] == ["code", "where", "Flink", "what changed"]
    assert len(rows) == len(report["findings"]) == 4
    for cells, finding in zip(rows, report["findings"], strict=True):
        code = finding["code"]
        assert cells[0].text == code + FINDING_CODES[code]
        assert cells[1].text == " / ".join(p for p in (finding["operator"], finding["state"], finding["path"]) if p)
        assert (cells[2].text, cells[2].classes) == (words(finding["verdict"]), verdict_class(finding["verdict"]))
        assert cells[3].text.startswith(finding["message"])
    changed = rows[0]
    assert (changed[3].del_, changed[3].ins) == (["Long"], ["String"])
    assert changed[3].text.endswith("migratable")
    assert page.classes["div.explanation"][0] == FINDING_CODES["POJO_FIELD_TYPE_CHANGED"]


def test_the_dry_run_shows_its_counts_failures_and_the_downtime_its_rate_gives(reports: Reports) -> None:
    page, section = Page(reports.plain_page), reports.plain["dry_run"]
    assert (section["entries"], section["failures"], section["dead_letters"]) == (60, 2, 2)
    assert page.classes["p.dry-run-summary"] == [
        f"60 entries decoded and migrated in memory ({section['tasks']} tasks) in {section['seconds']} s; 2 failed."]
    assert [[c.text for c in row] for row in body_rows(page, "dry-run")] == [
        [name, str(c["read"]), str(c["converted"]), str(c["failed"])] for name, c in section["states"].items()]
    assert sorted((e["key"], e["error"]) for e in section["examples"]) == [
        (8, "ValueError: <b>too big</b> 8"), (9, "ValueError: <b>too big</b> 9")]
    assert [[c.text for c in row] for row in body_rows(page, "failures")] == [
        [f"{KEYED} / KeyedPrimitiveValueMap", str(e["key"]), json.dumps(e["user_key"]), "dead-letter", e["error"]]
        for e in section["examples"]]
    rate = f"{section['entries'] / section['seconds']:,.0f}"
    assert page.classes["p.downtime"] == [
        f"Estimated downtime of the migration step: at least {section['seconds']} s, at the rate the dry run "
        f"measured ({rate} entries/s: decode and migrate in memory); the migration also writes and verifies every "
        "entry while the job is down, and the stop and the new job's start come on top."]


def test_a_dry_run_that_fails_makes_the_headline_incompatible(reports: Reports, capsys: pytest.CaptureFixture[str],
                                                              fixes_module: Path) -> None:
    """More dead letters than allowed: the dry run's warning, no downtime (nothing would run), the headline's note."""
    args = check_args(reports.source, reports.v2, "--format", "json")
    args[args.index("--max-dead-letters") + 1] = "1"
    code, out, err = cli(capsys, *args)
    assert code == 4, err
    page = Page(render_html(json.loads(out)))
    assert page.classes["h1.outcome-incompatible"] == [
        "Compatibility check: INCOMPATIBLE (the dry run shows the migration would fail)"]
    assert page.classes["p.warning"] == ["The migration would fail: 2 entries would be dead-lettered, more than the "
                                         "limit of 1 (--max-dead-letters)."]
    assert "p.downtime" not in page.classes


# -- names from the savepoint -----------------------------------------------------------------------------------


def markup_of(page: Page) -> list[tuple[str, tuple[tuple[str, str | None], ...]]]:
    """Every element and attribute of the page, in order, the <title>'s text aside (it is text)."""
    return page.tags


def test_hostile_names_create_no_element_or_attribute_and_show_as_text(reports: Reports) -> None:
    plain, hostile = Page(reports.plain_page), Page(reports.hostile_page)
    # The same report with other names: element for element, attribute for attribute the same page.
    assert markup_of(hostile) == markup_of(plain)
    assert not {name for _, attrs in hostile.tags for name, _ in attrs} - {"lang", "charset", "http-equiv", "content",
                                                                           "name", "class"}
    shown = "".join(hostile.text)
    assert HOSTILE_MARKUP in shown  # as text, character for character
    assert printable(HOSTILE_CONTROL) == "ops\\x1b[31m red\\x07 \\u202etxt.exe" and printable(HOSTILE_CONTROL) in shown
    for raw in ("\x1b", "\x07", "\u202e"):
        assert raw not in reports.hostile_page
    names = {cells[0].text for cells in body_rows(hostile, "states")}
    assert {HOSTILE_MARKUP, printable(HOSTILE_CONTROL)} <= names


def test_the_markup_check_fails_on_a_page_that_does_not_escape(reports: Reports,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """The check above can fail: rendered with escaping reduced to printable(), the hostile page gains a script and
    an image element and an onerror attribute."""
    monkeypatch.setattr(flinkstate.report_html, "escape_html", printable)
    broken = Page(render_html(reports.hostile))
    assert markup_of(broken) != markup_of(Page(render_html(reports.plain)))
    assert {"script", "img"} <= {tag for tag, _ in broken.tags}
    assert "onerror" in {name for _, attrs in broken.tags for name, _ in attrs}


def test_the_page_needs_nothing_at_view_time(reports: Reports) -> None:
    """No script, image, frame, link or stylesheet to fetch; the Content-Security-Policy forbids any fetch."""
    page = Page(reports.plain_page)
    assert not {"script", "img", "a", "link", "iframe", "object", "embed", "form", "base"} & {t for t, _ in page.tags}
    assert "://" not in reports.plain_page.replace(reports.plain["savepoint"], "")
    policy = [dict(attrs)["content"] for tag, attrs in page.tags if tag == "meta" and dict(attrs).get("http-equiv")]
    assert policy == ["default-src 'none'; style-src 'unsafe-inline'; form-action 'none'; base-uri 'none'"]


# -- who writes it ------------------------------------------------------------------------------------------------


def test_check_format_html_writes_the_page_rendered_from_its_json(reports: Reports, tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str],
                                                                   fixes_module: Path) -> None:
    code, printed, _ = cli(capsys, *check_args(reports.source, reports.v2, "--format", "json"))
    report = json.loads(printed)
    code_html, page, _ = cli(capsys, *check_args(reports.source, reports.v2, "--format", "html"))
    # The dry run's seconds differ from run to run: the page is the JSON's of the same run, every other value equal.
    assert (code, code_html) == (3, 3)
    seconds = Page(page).classes["p.dry-run-summary"][0].split(" in ")[-1].split(" s;")[0]
    report["dry_run"]["seconds"] = float(seconds)
    assert page == render_html(report)
    output = tmp_path / "report.html"
    code_o, printed_o, err = cli(capsys, *check_args(reports.source, reports.v2, "--format", "html", "-o",
                                                     str(output)))
    assert (code_o, printed_o) == (3, "")
    assert err.endswith(f"flinkstate: report written to {output} (migrate)\n")
    assert Page(output.read_text()).tags == Page(page).tags


def test_the_spark_jobs_write_the_page_beside_the_json_and_markdown(reports: Reports, tmp_path: Path,
                                                                    fixes_module: Path) -> None:
    """What the DAG runs (in one process here, as its in-process path does): the check's report folder and the
    migration's re-check folder each hold check-report.html, the page of the check-report.json beside it; the
    re-check's page shows the verification against the source."""
    from spark_jobs import check_compatibility, migrate_state

    common = ["--schema", str(reports.v2), "--in-process", "--allow-code=report_html_fixes", "--max-dead-letters", "5"]
    assert check_compatibility.main([str(reports.source), "--report-dir", str(tmp_path / "preflight"), *common]) == 0
    assert migrate_state.main([str(reports.source), "--output", str(tmp_path / "migrated" / "savepoint"),
                               "--old-schema", str(reports.v1), "--recheck-report-dir", str(tmp_path / "migrated"),
                               *common]) == 0
    for folder in ("preflight", "migrated"):
        body = json.loads((tmp_path / folder / "check-report.json").read_text())
        assert (tmp_path / folder / "check-report.html").read_text() == render_html(body)
    recheck = json.loads((tmp_path / "migrated" / "check-report.json").read_text())
    page = Page((tmp_path / "migrated" / "check-report.html").read_text())
    assert recheck["verification"] and page.classes["li."] == recheck["verification"]
    assert page.classes["p.verified-against"] == [f"Source savepoint: {recheck['verified_against']}"]


# -- the table of codes and bad input -----------------------------------------------------------------------------


def emitted_codes() -> set[str]:
    """Every finding code flinkstate's rules can emit, read from their sources: the first argument of each
    ``Finding(...)`` (and of the families' ``finding(...)`` helpers), the codes composites relabel a nested type
    change to, the code variables set from constants, and the Scala composites' ``WHAT`` names."""
    found: set[str] = set()

    def constants(node: ast.AST) -> set[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return {node.value}
        if isinstance(node, ast.IfExp):
            return constants(node.body) | constants(node.orelse)
        return set()

    for path in (ROOT / "flinkstate").rglob("*.py"):
        text = path.read_text()
        if "inding(" not in text and "relabel_type_change" not in text and "NESTED_TYPE_CHANGED" not in text:
            continue  # no rule here (parsing all of flinkstate takes seconds)
        for node in ast.walk(ast.parse(text, str(path))):
            if isinstance(node, ast.Call):
                name = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", None)
                if name in ("Finding", "finding") and node.args:
                    found |= constants(node.args[0])
                elif name == "relabel_type_change" and len(node.args) > 2:
                    found |= constants(node.args[2])
            elif isinstance(node, ast.Assign | ast.AnnAssign) and node.value is not None:
                for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(target, ast.Name) and target.id in ("NESTED_TYPE_CHANGED", "code"):
                        found |= constants(node.value)
                    elif isinstance(target, ast.Name) and target.id == "WHAT":
                        found |= {f"SCALA_{w.upper().replace(' ', '_')}_CHANGED" for w in constants(node.value) if w}
                    elif isinstance(target, ast.Tuple) and isinstance(node.value, ast.Tuple) and any(
                            isinstance(t, ast.Name) and t.id == "code" for t in target.elts[:1]):
                        found |= constants(node.value.elts[0])
    return found


def test_every_finding_code_has_its_sentence_and_no_other() -> None:
    emitted = emitted_codes()
    assert {"POJO_FIELD_TYPE_CHANGED", "ROW_FIELD_ADDED", "TTL_ENABLED", "SCALA_CASE_CLASS_CHANGED",
            "TUPLE_FIELD_TYPE_CHANGED", "KRYO_REGISTRATION_ABSENT", "TRIAL_DISAGREES"} <= emitted
    assert sorted(emitted - set(FINDING_CODES)) == [], "codes without an explanation"
    assert sorted(set(FINDING_CODES) - emitted) == [], "explanations of codes no rule emits"
    assert all(text.endswith(".") and text.count(". ") == 0 for text in FINDING_CODES.values())


@pytest.mark.parametrize(("document", "error"), [
    ({"report_version": 2}, "x/check-report.json: not a check report of version 1 (report_version 2)"),
    ([], "x/check-report.json: not a check report of version 1 (report_version None)"),
    ({"report_version": 1, "outcome": "<maybe>"}, "x/check-report.json: unexpected outcome <maybe>"),
    ({"report_version": 1, "outcome": "restore", "states": "all", "findings": []},
     "x/check-report.json: 'states' is not a list of objects"),
])
def test_a_document_that_is_not_a_check_report_is_refused_in_one_line(document: Any, error: str) -> None:
    with pytest.raises(ReportFormatError) as raised:
        render_html(document, "x/check-report.json")
    assert str(raised.value) == error

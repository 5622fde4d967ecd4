"""Issue 29: the "Flink upgrades" view of the Airflow UI (plugins/flinkstate_airflow/ui.py), its FastAPI app driven
with FastAPI's TestClient on run folders laid out as the upgrade DAG writes them (tests/support/run_folders.py: the
plugin's own run records, flinkstate's registry and journal, real savepoints): the runs per deployment newest first
with their outcome, what runs, the downtime and the savepoints; a run's page with its figures and its report (the
HTML report inline when there is one, else the Markdown escaped); hostile names escaped; no URL and no link leading
out of the savepoint base; a broken run record one line. The view in a real Airflow api-server and a real browser:
tests/test_airflow_standalone.py."""

from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from flinkstate import UpgradeJournal, safe_name
from tests.support.run_folders import lay_out_runs

from flinkstate_airflow import ui  # isort: skip  (on the path once tests.support.run_folders is imported)
from flinkstate_airflow.upgrade import write_run_record  # isort: skip

DAG = "flink_state_upgrade"
JOB = "ab" * 16
HOSTILE = "<img src=x onerror=alert(1)>\"'&"
HOSTILE_RUN = "manual__<script>alert(2)</script>"
MARKDOWN = ("# Compatibility check: migration required and possible\n\n| operator | state | verdict |\n|---|---|---|\n"
            "| stats | stats | after migration |\n| <script>alert(3)</script> | count | as is |\n")
HTML_REPORT = ("<!DOCTYPE html><html><head><style>.v{color:green}</style></head><body><h1>Compatibility check</h1>"
               "<p class=\"v\">stats / stats: COMPATIBLE_AFTER_MIGRATION &amp; \"quoted\"</p></body></html>")


class Page(HTMLParser):
    """A page as its elements: every tag with its attributes, the text, and each table's rows of cell texts."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.tables: list[list[list[str]]] = []
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if self._cell is not None:  # an element inside a cell is a word of its own (a list item)
            self._cell.append(" ")
        if tag == "table":
            self.tables.append([])
        elif tag == "tr":
            self.tables[-1].append([])
        elif tag in ("td", "th"):
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in ("td", "th") and self._cell is not None:
            self.tables[-1][-1].append(" ".join("".join(self._cell).split()))
            self._cell = None

    def handle_data(self, data: str) -> None:
        self.text.append(data)
        if self._cell is not None:
            self._cell.append(data)

    def attribute(self, tag: str, name: str) -> list[str | None]:
        return [attrs.get(name) for t, attrs in self.tags if t == tag and name in attrs]


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """orders: r1 and r2 upgraded (r2 concluded as the DAG's conclude records it, the job runs from r2's migrated
    savepoint), r3 unfinished; r1 has an HTML report, r2 a Markdown one. And a refused run of a deployment whose
    name and run id are hostile."""
    base = tmp_path / "base"
    lay_out_runs(str(base))
    r1, r2 = base / "orders" / "r1", base / "orders" / "r2"
    write_run_record({"run_dir": str(r2)}, {
        "stage": "done", "outcome": "upgraded", "stop_savepoint": f"{r2}/stop/savepoint-aa-2",
        "gate": {"passed": True, "checkpoints": 6}, "durations": {"stop": 0.6, "migrate": 12.5, "gate": 31.0,
                                                                   "down": 47.3},
        "failures": [], "running": {"version": "new", "job_id": JOB}})
    (r2 / "preflight" / "check-report.md").write_text(MARKDOWN)
    (r1 / "preflight" / "check-report.html").write_text(HTML_REPORT)
    (r1 / "preflight" / "check-report.md").write_text("the Markdown of a run that has an HTML report")
    hostile_dir = base / safe_name(HOSTILE) / safe_name(HOSTILE_RUN)
    plan = {"run_id": HOSTILE_RUN, "run_dir": str(hostile_dir), "dag_id": DAG, "new": {"jar": f"/jobs/{HOSTILE}.jar"}}
    write_run_record(plan, {"stage": "planned"})
    write_run_record(plan, {"stage": "checked", "check_outcome": "incompatible", "verdict": HOSTILE})
    write_run_record(plan, {"stage": "done", "outcome": "refused", "running": {"version": "new", "job_id": HOSTILE}})
    (hostile_dir / "preflight").mkdir()
    (hostile_dir / "preflight" / "check-report.md").write_text(f"| {HOSTILE} | state | incompatible |\n")
    UpgradeJournal.start({"savepoint_base": str(base), "job_name": HOSTILE, "run_id": HOSTILE_RUN,
                          "run_dir": str(hostile_dir), "old": {}, "new": {}, "job_id": JOB}, "resolve")
    return base


def _client(*bases: Path | str) -> TestClient:
    return TestClient(ui.create_app(lambda: [str(b) for b in bases]))


def _get(client: TestClient, url: str, status: int = 200) -> Page:
    response = client.get(url)
    assert response.status_code == status, response.text
    assert response.headers["content-security-policy"] == ui.CONTENT_SECURITY_POLICY
    return Page(response.text)


def _run_url(run_id: str, dag_id: str = DAG) -> str:
    from urllib.parse import quote

    return f"/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}"


def test_the_list_shows_each_deployments_runs_newest_first(base: Path) -> None:
    page = _get(_client(base), "/")
    text = " ".join("".join(page.text).split())
    assert (f"Runs now: v2.jar as job {'0' * 32}, restored from {base}/orders/r2/migrated/savepoint (savepoint base "
            f"{base})") in text
    orders = page.tables[1]  # the hostile deployment's name sorts first
    assert [row[:6] for row in orders] == [
        ["planned", "run", "check", "outcome", "running after it", "down"],
        ["2026-11-03T10:00:00Z", "r3", "migrate (COMPATIBLE_AFTER_MIGRATION)", "unfinished (checked)", "", "—"],
        ["2026-11-02T10:00:00Z", "r2", "migrate (COMPATIBLE_AFTER_MIGRATION)", "upgraded",
         f"the new version (v3.jar) as job {JOB}", "47.3 s"],
        ["2026-11-01T10:00:00Z", "r1", "migrate (COMPATIBLE_AFTER_MIGRATION)", "upgraded", "", "—"]]
    assert orders[2][6] == ("migrated/savepoint (kept: the running job was restored from it) "
                            "preflight/savepoint-aa-1 stop/savepoint-aa-2")
    assert orders[1][6].startswith("migrated/savepoint (kept: its run is unfinished) preflight/savepoint-aa-1")
    assert f"{base}/orders/r2/stop/savepoint-aa-2" in page.attribute("code", "title")  # the whole location
    # Each run links to its page, by its DAG run.
    assert [h for h in page.attribute("a", "href") if h and "/orders" not in h][-3:] == [
        _run_url("r3"), _run_url("r2"), _run_url("r1")]


def test_a_runs_page_shows_its_figures_and_its_report(base: Path) -> None:
    client = _client(base)
    page = _get(client, _run_url("r2"))
    figures = dict(row for row in page.tables[0] if len(row) == 2)
    assert figures["outcome"] == "upgraded" and figures["check"] == "migrate (COMPATIBLE_AFTER_MIGRATION)"
    assert figures["running after it"] == f"the new version (v3.jar) as job {JOB}"
    assert figures["down"].startswith("47.3 s (from the stop request until every subtask")
    assert figures["steps"] == "stop 0.6 s, migrate 12.5 s, gate 31.0 s"
    assert figures["health gate"] == "passed: True, checkpoints: 6"
    # No HTML report: the Markdown, escaped, in a <pre> (its <script> is text).
    assert "".join(page.text).count(MARKDOWN) == 1 and page.attribute("pre", "class") == ["report"]
    assert "script" not in [tag for tag, _ in page.tags] and page.attribute("iframe", "srcdoc") == []
    # An HTML report is shown inline, as it is (srcdoc: no request), and its Markdown is not.
    page = _get(client, _run_url("r1"))
    assert page.attribute("iframe", "srcdoc") == [HTML_REPORT]
    assert page.attribute("iframe", "sandbox") == [""]  # no script in it either
    assert "the Markdown of a run that has an HTML report" not in "".join(page.text)
    # A run not recorded, or of another DAG: 404, one sentence.
    assert "No Flink upgrade recorded for DAG run r9" in "".join(_get(client, _run_url("r9"), 404).text)
    assert "No Flink upgrade recorded" in "".join(_get(client, _run_url("r2", "other_dag"), 404).text)


def test_hostile_names_are_text(base: Path) -> None:
    client = _client(base)
    expected = {"html", "head", "meta", "title", "style", "body", "h1", "h2", "p", "table", "tr", "th", "td", "a",
                "span", "ul", "li", "b", "i", "code", "pre", "iframe"}
    for url in ("/", _run_url(HOSTILE_RUN)):
        page = _get(client, url)
        assert {tag for tag, _ in page.tags} <= expected, url
        assert not [name for _, attrs in page.tags for name in attrs if name.startswith("on")], url
        text = "".join(page.text)
        assert HOSTILE in text and "<script>alert(2)</script>" in text, url
    page = _get(client, "/")
    assert page.tables[0][1][1:6] == [HOSTILE_RUN, f"incompatible ({HOSTILE})", "refused",
                                     f"the new version ({HOSTILE}.jar) as job {HOSTILE}", "—"]
    assert _run_url(HOSTILE_RUN) in page.attribute("a", "href")  # its link, URL-encoded, leads to its page
    assert f"| {HOSTILE} | state | incompatible |" in "".join(_get(client, _run_url(HOSTILE_RUN)).text)


def test_no_url_and_no_link_leads_out_of_the_base(base: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    # A run folder elsewhere, linked into a deployment folder; a deployment folder that is a link out of the base;
    # a report that is a link to a file outside.
    secret_run = outside / "runs" / "evil"
    write_run_record({"run_id": "evil", "run_dir": str(secret_run)}, {"stage": "done", "outcome": "upgraded"})
    (secret_run / "preflight").mkdir()
    (secret_run / "preflight" / "check-report.md").write_text("SECRET of the linked run")
    (base / "orders" / "evil").symlink_to(secret_run)
    (base / "linked").symlink_to(outside / "runs")
    UpgradeJournal.start({"savepoint_base": str(base), "job_name": "linked", "run_id": "evil",
                          "run_dir": str(base / "linked" / "evil"), "old": {}, "new": {}, "job_id": JOB}, "resolve")
    (outside / "secret.md").write_text("SECRET file outside")
    (base / "orders" / "r3" / "preflight" / "check-report.md").symlink_to(outside / "secret.md")
    client = _client(base)
    page = _get(client, "/")
    text = "".join(page.text)
    assert "SECRET" not in text and "evil" not in [row[1] for table in page.tables for row in table]
    assert f"{base}/linked: a link out of the savepoint base, not read" in text
    assert "SECRET" not in "".join(_get(client, _run_url("r3")).text)
    _get(client, _run_url("evil"), 404)
    for url in (f"/dags/{DAG}/runs/..", f"/dags/{DAG}/runs/..%2F..%2Foutside%2Fruns%2Fevil",
                f"/dags/{DAG}/runs/%2E%2E", "/dags/..%2F..%2Foutside/runs/evil"):
        response = client.get(url)
        assert response.status_code == 404 and "SECRET" not in response.text, url


def test_a_broken_run_record_is_one_line(base: Path, tmp_path: Path) -> None:
    (base / "orders" / "r1" / "run.json").write_text("{not json")
    page = _get(_client(base, tmp_path / "no-such-base"), "/")
    problems = [t for t in page.text if "not a run record" in t]
    assert len(problems) == 1 and problems[0].startswith(f"{base}/orders/r1/run.json: not a run record (")
    assert "Traceback" not in "".join(page.text)
    # The other deployment is still shown; a base with nothing in it shows nothing.
    assert page.tables[0][1][1] == HOSTILE_RUN
    assert "No savepoint base configured" in "".join(_get(_client(), "/").text)


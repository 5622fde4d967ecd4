"""The "Flink upgrades" view of the Airflow UI: the upgrade runs per deployment, newest first (outcome, what runs now,
the downtime, the savepoints), and per run its check reports with the figures of its ``run.json``.

Everything shown is read, at each request, from what the upgrade DAG leaves under its savepoint bases (the
deployment registry, the journals, each run's folder: see :mod:`flinkstate_airflow.upgrade` for the layout), through
:func:`flinkstate.deployment_history`, the same reading as ``flinkstate history``. The view writes nothing and loads
nothing from the network: its pages are plain HTML with an inline style, every name in them escaped (deployment,
operator and state names come from savepoints and manifests), and each is served with a Content-Security-Policy that
allows no script and no request.

A run's page is addressed by its DAG run (``/dags/<dag id>/runs/<run id>``), so the DAG run's own tab in the Airflow
UI and the run's alert link to it. The ids in a URL are only ever compared with the runs the history lists, never
joined into a path, and a local base is read only inside itself: a deployment or run folder, or a report, that is (or
lies behind) a symbolic link pointing out of the base is left out.

The app is built by :func:`create_app` (no Airflow in it: tests build it on their own folders); the Airflow plugin
(``flinkstate_plugin.py``) mounts it with Airflow's access check in front.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlparse

from fastapi import Depends, FastAPI, Request
from fastapi.responses import HTMLResponse

from flinkstate import (
    DeploymentRegistry,
    FlinkStateError,
    RunHistory,
    UpgradeJournal,
    deployment_history,
    exists,
    local_path,
    printable,
    read_file,
    read_run_record,
    safe_name,
)

#: Where Airflow's api-server mounts the view, and the routes of its two entries in the UI (the nav's page, and the
#: DAG run's tab, whose page Airflow opens as /dags/<dag>/runs/<run>/plugin/<route>).
URL_PREFIX = "/flink-upgrades"
NAV_ROUTE, RUN_TAB_ROUTE = "flink-upgrades", "flink-upgrade"
#: A run's folders that hold a check report (each check-report.{json,md,html}), as its page shows them.
REPORT_FOLDERS = {"preflight": "the check before the stop (preflight savepoint)",
                  "migrated": "the re-check of the migrated savepoint"}
DEFAULT_DAG_ID = "flink_state_upgrade"
#: No script, no request of any kind (a report is shown inline): only the pages' own inline style and data: images.
CONTENT_SECURITY_POLICY = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; frame-ancestors 'self'"

OUTCOME_COLOURS = {"upgraded": "#1a7f37", "checked": "#0969da", "refused": "#9a6700", "unchanged": "#57606a",
                   "rolled back": "#bc4c00", "DOWN": "#cf222e", "taken over": "#8250df"}


def savepoint_bases() -> list[str]:
    """The bases the view reads: ``FLINKSTATE_SAVEPOINT_BASES`` (comma-separated), as the watchdog sweeps them."""
    return [b.strip() for b in os.environ.get("FLINKSTATE_SAVEPOINT_BASES", "").split(",") if b.strip()]


def run_tab_url(base_url: str, dag_id: str, run_id: str) -> str:
    """The DAG run's "Flink upgrade" tab in the Airflow UI (``base_url``: Airflow's ``[api] base_url``)."""
    return (f"{base_url.rstrip('/')}/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/plugin/"
            f"{RUN_TAB_ROUTE}")


@dataclass(frozen=True)
class UpgradeRun:
    """One run as the view shows it: the history's account and the run's ``run.json``."""

    deployment: str
    history: RunHistory
    record: dict[str, Any]

    @property
    def dag_id(self) -> str:
        return str((self.record.get("plan") or {}).get("dag_id") or DEFAULT_DAG_ID)

    @property
    def done(self) -> dict[str, Any]:
        """The run's conclusion (its last ``done`` event; empty while it is unfinished)."""
        return next((e for e in reversed(self.record.get("events") or []) if e.get("stage") == "done"), {})

    @property
    def down(self) -> float | None:
        down = (self.done.get("durations") or {}).get("down")
        return float(down) if isinstance(down, (int, float)) else None

    def running_now(self) -> str:
        """What the run left running: the old or the new version (its jar) and the job id; empty when unknown."""
        running = self.done.get("running") or {}
        version = (self.record.get("plan") or {}).get(str(running.get("version"))) or {}
        if not running:
            return ""
        return f"the {running.get('version')} version ({Path(str(version.get('jar', '?'))).name}) as job " \
               f"{running.get('job_id')}"


@dataclass
class Deployment:
    base: str
    name: str
    registered: dict[str, Any] | None  # the registry's entry: what runs now
    runs: list[UpgradeRun] = field(default_factory=list)  # newest first
    problem: str = ""  # one line: why its runs cannot be shown


def read_deployments(bases: Sequence[str]) -> tuple[list[Deployment], list[str]]:
    """Every deployment with recorded runs under ``bases``, and one line per base that cannot be read."""
    found, problems = [], []
    for base in bases:
        base = base.rstrip("/")
        try:
            registry = DeploymentRegistry(base).load()
            names = sorted(set(registry) | {j.data["deployment"] for j in UpgradeJournal.all(base)})
        except (FlinkStateError, OSError, KeyError) as exc:
            problems.append(f"{base}: {printable(str(exc))}")
            continue
        for name in names:
            deployment = Deployment(base, name, registry.get(name))
            found.append(deployment)
            try:
                if not _inside(base, f"{base}/{safe_name(name)}"):
                    raise FlinkStateError(f"{base}/{safe_name(name)}: a link out of the savepoint base, not read")
                runs = [r for r in deployment_history(base, name) if _inside(base, r.run_dir)]
                deployment.runs = [UpgradeRun(name, r, read_run_record(f"{r.run_dir}/run.json"))
                                   for r in reversed(runs)]
            except (FlinkStateError, OSError) as exc:
                deployment.problem = printable(str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
    return found, problems


def find_run(bases: Sequence[str], dag_id: str, run_id: str) -> UpgradeRun | None:
    """The run of DAG run ``run_id`` of ``dag_id``: compared with the runs the history lists, never made a path."""
    for deployment in read_deployments(bases)[0]:
        for run in deployment.runs:
            if run.history.run_id == run_id and run.dag_id == dag_id:
                return run
    return None


def _inside(base: str, location: str) -> bool:
    """Whether a local ``location`` is really inside ``base`` (no link on the way leads out); S3 has no links."""
    if urlparse(base).scheme in ("s3", "s3a"):
        return True
    root = Path(local_path(base)).resolve()
    return Path(local_path(location)).resolve().is_relative_to(root)


# ---------------------------------------------------------------------- pages


def create_app(bases: Callable[[], Sequence[str]] = savepoint_bases,
               dependencies: Sequence[Any] = ()) -> FastAPI:
    """The view's FastAPI app: ``bases`` gives the savepoint bases at each request; ``dependencies`` run before
    each page (the plugin passes Airflow's access check)."""
    app = FastAPI(title="Flink upgrades", docs_url=None, redoc_url=None, openapi_url=None,
                  dependencies=[Depends(d) for d in dependencies])

    @app.get("/", response_class=HTMLResponse)
    def runs_page(request: Request) -> HTMLResponse:
        deployments, problems = read_deployments(bases())
        return _page("Flink upgrades", _runs_html(request, deployments, problems, list(bases())))

    @app.get("/dags/{dag_id}/runs/{run_id:path}", response_class=HTMLResponse)  # a run id may hold a /
    def run_page(request: Request, dag_id: str, run_id: str) -> HTMLResponse:
        run = find_run(bases(), dag_id, run_id)
        if run is None:
            body = (f"<p>No Flink upgrade recorded for DAG run <code>{_e(run_id)}</code> of <code>{_e(dag_id)}"
                    f"</code> under the savepoint bases this view reads.</p>{_back(request)}")
            return _page("Flink upgrade: no such run", body, status_code=404)
        return _page(f"Flink upgrade of {run.deployment}", _run_html(request, run))

    return app


def _e(value: object) -> str:
    return html.escape(printable(str(value)), quote=True)


def _page(title: str, body: str, status_code: int = 200) -> HTMLResponse:
    text = (f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{_e(title)}</title>"
            f"<style>{STYLE}</style></head><body><h1>{_e(title)}</h1>{body}</body></html>")
    return HTMLResponse(text, status_code=status_code, headers={"Content-Security-Policy": CONTENT_SECURITY_POLICY,
                                                                "X-Content-Type-Options": "nosniff"})


def _root(request: Request) -> str:
    return str(request.scope.get("root_path", "")).rstrip("/")


def _run_link(request: Request, run: UpgradeRun) -> str:
    return f"{_root(request)}/dags/{quote(run.dag_id, safe='')}/runs/{quote(run.history.run_id, safe='')}"


def _back(request: Request) -> str:
    return f"<p><a href=\"{_e(_root(request))}/\">All Flink upgrades</a></p>"


def _outcome(run: UpgradeRun) -> str:
    outcome = run.history.outcome or f"unfinished ({run.history.stage})"
    colour = OUTCOME_COLOURS.get(str(run.history.outcome), "#57606a")
    return f"<span class=\"outcome\" style=\"background:{colour}\">{_e(outcome)}</span>"


def _savepoints(run: UpgradeRun, *, in_run_folder: bool = False) -> str:
    """The run's savepoints, each with what keeps it; ``in_run_folder``: named inside the run's folder (the list's
    narrow column), the whole location in its tooltip."""
    def name(location: str) -> str:
        inside = location.removeprefix(f"{run.history.run_dir}/")
        return f"<code title=\"{_e(location)}\">{_e(inside)}</code>" if in_run_folder else \
            f"<b>{_e(inside.split('/', 1)[0])}</b> <code>{_e(location)}</code>"

    items = [f"<li>{name(s.location)}" + (f" <i>(kept: {_e(s.needed)})</i>" if s.needed else "") + "</li>"
             for s in run.history.savepoints]
    return f"<ul>{''.join(items)}</ul>" if items else "<i>none left</i>"


def _runs_html(request: Request, deployments: list[Deployment], problems: list[str], bases: list[str]) -> str:
    parts = [f"<p class=\"problem\">{_e(p)}</p>" for p in problems]
    if not bases:
        parts.append("<p>No savepoint base configured: set FLINKSTATE_SAVEPOINT_BASES (comma-separated) for the "
                     "api-server.</p>")
    elif not deployments and not problems:
        parts.append(f"<p>No upgrade runs yet under {_e(', '.join(bases))}.</p>")
    for deployment in deployments:
        parts.append(f"<h2>{_e(deployment.name)}</h2>")
        entry = deployment.registered
        if entry:
            version = entry.get("version") or {}
            parts.append(f"<p>Runs now: <code>{_e(Path(str(version.get('jar', '?'))).name)}</code> as job "
                         f"<code>{_e(entry.get('job_id'))}</code>, restored from <code>{_e(entry.get('savepoint'))}"
                         f"</code> (savepoint base <code>{_e(deployment.base)}</code>)</p>")
        else:
            parts.append(f"<p>No version recorded as running (savepoint base <code>{_e(deployment.base)}</code>)</p>")
        if deployment.problem:
            parts.append(f"<p class=\"problem\">{_e(deployment.problem)}</p>")
            continue
        rows = [f"<tr><td class=\"num\">{_e(run.history.planned_at)}</td><td><a href=\"{_e(_run_link(request, run))}\">"
                f"{_e(run.history.run_id)}</a></td><td>{_e(run.history.check_outcome or 'not checked')}"
                f"{' (' + _e(run.history.verdict) + ')' if run.history.verdict else ''}</td><td>{_outcome(run)}</td>"
                f"<td>{_e(run.running_now())}</td><td class=\"num\">{_seconds(run.down)}</td>"
                f"<td>{_savepoints(run, in_run_folder=True)}</td></tr>" for run in deployment.runs]
        parts.append("<table><tr><th>planned</th><th>run</th><th>check</th><th>outcome</th><th>running after it</th>"
                     "<th>down</th><th>savepoints</th></tr>" + "".join(rows) + "</table>")
    return "".join(parts)


def _seconds(value: float | None) -> str:
    return f"{value:.1f} s" if value is not None else "&mdash;"


def _run_html(request: Request, run: UpgradeRun) -> str:
    plan, done = run.record.get("plan") or {}, run.done
    durations = done.get("durations") or {}
    gate = done.get("gate") or {}
    figures = [
        ("outcome", _outcome(run)),
        ("DAG run", f"<code>{_e(run.dag_id)}</code> / <code>{_e(run.history.run_id)}</code>"),
        ("planned", _e(run.history.planned_at)),
        ("check", _e(f"{run.history.check_outcome or 'not checked'}"
                     + (f" ({run.history.verdict})" if run.history.verdict else ""))),
        ("from", f"<code>{_e((plan.get('old') or {}).get('jar', '?'))}</code>"),
        ("to", f"<code>{_e(run.history.version)}</code>"),
        ("running after it", _e(run.running_now() or "unknown (the run is unfinished)")),
        ("down", _seconds(run.down) + " <i>(from the stop request until every subtask of the job that runs now was "
                                      "RUNNING, Flink's own timestamps)</i>"),
        ("steps", _e(", ".join(f"{k} {v} s" for k, v in durations.items() if k != "down")) or "&mdash;"),
        ("health gate", _e(", ".join(f"{k}: {v}" for k, v in gate.items())) or "&mdash;"),
        ("failures", _e("; ".join(str(f) for f in done.get("failures") or [])) or "none"),
        ("savepoints", _savepoints(run)),
        ("run folder", f"<code>{_e(run.history.run_dir)}</code>"),
    ]
    if plan.get("recovered"):
        rec = plan["recovered"]
        figures.append(("recovered first", _e(f"run {rec.get('run_id')} (died in phase {rec.get('phase')}): "
                                              f"{rec.get('outcome')}: {rec.get('account')}")))
    parts = [_back(request), "<table class=\"figures\">"]
    parts += [f"<tr><th>{_e(name)}</th><td>{value}</td></tr>" for name, value in figures]
    parts.append("</table>")
    for folder, what in REPORT_FOLDERS.items():
        parts.append(_report_html(run, folder, what))
    return "".join(parts)


def _report_html(run: UpgradeRun, folder: str, what: str) -> str:
    """A check report: its HTML page inline (``srcdoc``: no request, the page's own sandbox), else its Markdown,
    escaped, else nothing (that check did not run)."""
    report_dir = f"{run.history.run_dir}/{folder}"
    page, markdown = f"{report_dir}/check-report.html", f"{report_dir}/check-report.md"
    base = run.history.run_dir
    heading = f"<h2>Report: {_e(what)}</h2>"
    try:
        if exists(page) and _inside(base, page):
            text = read_file(page).decode("utf-8", errors="replace")
            return (f"{heading}<iframe class=\"report\" title=\"{_e(what)}\" sandbox=\"\" "
                    f"srcdoc=\"{html.escape(text, quote=True)}\"></iframe>")
        if exists(markdown) and _inside(base, markdown):
            text = read_file(markdown).decode("utf-8", errors="replace")
            return f"{heading}<pre class=\"report\">{html.escape(text)}</pre>"
    except (FlinkStateError, OSError) as exc:
        return f"{heading}<p class=\"problem\">{_e(str(exc).splitlines()[0] if str(exc) else exc)}</p>"
    return ""


STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:1.2em;color:#1f2328}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em}
table{border-collapse:collapse;margin:.5em 0}th,td{border:1px solid #d0d7de;padding:4px 8px;vertical-align:top;
text-align:left}th{background:#f6f8fa}td.num{text-align:right;white-space:nowrap}
table.figures th{width:10em}ul{margin:0;padding-left:1.2em}code{font-size:12px;word-break:break-all}
.outcome{color:#fff;border-radius:4px;padding:1px 6px;font-weight:600;white-space:nowrap}
.problem{color:#cf222e;font-weight:600}
pre.report{background:#f6f8fa;border:1px solid #d0d7de;padding:8px;overflow:auto;white-space:pre-wrap}
iframe.report{width:100%;height:70vh;border:1px solid #d0d7de}
"""

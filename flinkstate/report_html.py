"""The check report as one self-contained HTML page (``flinkstate check --format html``, and ``check-report.html``
beside the JSON and Markdown reports the upgrade DAG writes).

Its only input is the report's JSON form (:meth:`flinkstate.report.Report.to_json`, ``report_version`` 1, with the
sections the Spark jobs add: ``dry_run``, ``trial``, ``verified_against``, ``verification``), so that anything
holding a ``check-report.json`` alone (the DAG, an Airflow view) renders the same page. The page needs nothing at
view time: its CSS is inline, it has no script, no image and no link, and its Content-Security-Policy forbids any
fetch, so a browser opening it from a file or a server reaches nothing.

Every text from the report (operator and state names, types, messages, paths, errors) goes through
:func:`flinkstate.report.escape_html`: a name cannot create an element or an attribute, and control characters and
bidi overrides are shown escaped. Everything else on the page is this module's own constant markup.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from typing import Any

from flinkstate.compatibility import INCOMPATIBLE, Verdict
from flinkstate.errors import FlinkStateError, printable
from flinkstate.finding_codes import explain
from flinkstate.report import REPORT_VERSION, VERDICT_WORDS, escape_html, headline_text

#: The CSS class of each verdict's cell (its colour), and of each outcome's headline.
_VERDICT_CLASS = {Verdict.COMPATIBLE_AS_IS: "as-is", Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER: "reconfigured",
                  Verdict.COMPATIBLE_AFTER_MIGRATION: "after-migration", INCOMPATIBLE: "incompatible"}
_OUTCOMES = ("restore", "migrate", "incompatible")
#: A type's text split for the side-by-side diff: names (``com.example.Pojo`` in three), spaces, one sign each.
_TYPE_TOKENS = re.compile(r"\w+|\s+|[^\w\s]")
#: The order of a state's types, as the Markdown report writes them.
_TYPE_KEYS = ("namespace", "user_key", "value")

_CSS = """
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: #1d232b; margin: 24px;
       background: #fafbfc; }
h1 { font-size: 22px; margin: 0 0 12px; padding: 10px 14px; border-radius: 6px; border-left: 8px solid; }
h1.outcome-restore { background: #e6f4ea; border-color: #1e8e3e; }
h1.outcome-migrate { background: #fef7e0; border-color: #e37400; }
h1.outcome-incompatible { background: #fce8e6; border-color: #c5221f; }
h2 { font-size: 17px; margin: 26px 0 8px; }
table { border-collapse: collapse; background: #fff; margin: 6px 0 10px; }
th, td { border: 1px solid #d0d7de; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f0f3f6; font-weight: 600; }
table.summary th { width: 16em; }
code, .type { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; }
.type { white-space: pre-wrap; word-break: break-word; min-width: 14em; max-width: 34em; }
del { background: #ffd7d5; color: #82071e; text-decoration: line-through; }
ins { background: #ccffd8; color: #055d20; text-decoration: none; font-weight: 600; }
td.verdict { font-weight: 600; white-space: nowrap; }
.v-as-is { background: #e6f4ea; color: #135d27; }
.v-reconfigured { background: #e3f1fb; color: #0b4f7c; }
.v-after-migration { background: #fef3d6; color: #8a4b00; }
.v-incompatible { background: #fbd9d6; color: #a50e0e; }
.v-unknown { background: #eee; color: #333; }
.explanation { color: #57606a; font-size: 12.5px; }
.flag { display: inline-block; margin: 2px 4px 0 0; padding: 0 6px; border-radius: 9px; font-size: 12px;
        background: #eef1f4; }
.flag.silent { background: #a50e0e; color: #fff; }
.warning { color: #a50e0e; font-weight: 600; }
.note { color: #57606a; }
footer { margin-top: 28px; color: #57606a; font-size: 12px; }
"""


class ReportFormatError(FlinkStateError):
    """A JSON document that is not a check report the page can be rendered from."""


def render_html(report: Mapping[str, Any], source: str | None = None) -> str:
    """The page of one check report (its JSON form). ``source`` names the report's file in an error: a document
    that is not a version-1 check report is refused in one line (:class:`ReportFormatError`)."""
    _require_report(report, source)
    outcome = report["outcome"]
    verdict = _verdict(report["verdict"])
    headline = headline_text(outcome, verdict or INCOMPATIBLE, "dry_run" in report)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # No fetch of any kind (scripts, styles, images, fonts, frames, forms): the page is all there is.
        "<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; "
        "form-action 'none'; base-uri 'none'\">",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>Compatibility check: {escape_html(headline)}: {escape_html(report['savepoint'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f'<h1 class="outcome-{outcome}">Compatibility check: {escape_html(headline)}</h1>',
        _summary(report),
        _verdicts(report, verdict),
        _states(report),
        _findings(report["findings"]),
    ]
    if isinstance(report.get("dry_run"), Mapping):
        parts.append(_dry_run(report["dry_run"], outcome))
    elif outcome == "migrate":
        parts.append('<p class="note">The migration was planned from the serializer snapshots only; run the check '
                     "with <code>--dry-run</code> to decode and migrate every entry in memory first.</p>")
    if isinstance(report.get("trial"), Mapping):
        parts.append(_trial(report["trial"], report["states"]))
    if "verified_against" in report or "verification" in report or "verification_error" in report:
        parts.append(_verification(report))
    parts.append(f"<footer>Rendered by flinkstate from the check report's JSON (report_version "
                 f"{REPORT_VERSION}), exit status {escape_html(report.get('exit_code', ''))}.</footer>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def _require_report(report: Mapping[str, Any], source: str | None) -> None:
    where = f"{printable(source)}: " if source else ""
    if not isinstance(report, Mapping) or report.get("report_version") != REPORT_VERSION:
        version = report.get("report_version") if isinstance(report, Mapping) else None
        raise ReportFormatError(f"{where}not a check report of version {REPORT_VERSION} (report_version "
                                f"{printable(version)})")
    if report.get("outcome") not in _OUTCOMES:
        raise ReportFormatError(f"{where}unexpected outcome {printable(report.get('outcome'))}")
    for key in ("states", "findings"):
        if not isinstance(report.get(key), list) or not all(isinstance(item, Mapping) for item in report[key]):
            raise ReportFormatError(f"{where}'{key}' is not a list of objects")


# -- the head: where the report comes from, and the two verdicts --------------------------------------------------


def _summary(report: Mapping[str, Any]) -> str:
    rows = [("savepoint", f"<code>{escape_html(report['savepoint'])}</code>"),
            ("new version's state schema", _schema_source(report)),
            ("state backend", escape_html(report.get("backend", "any"))),
            ("allowNonRestoredState", "yes" if report.get("allow_non_restored_state") else "no")]
    return '<table class="summary">' + "".join(f"<tr><th>{name}</th><td>{value}</td></tr>" for name, value in rows) \
        + "</table>"


def _schema_source(report: Mapping[str, Any]) -> str:
    """Where the new version's types came from: its job jar (completed by an overlay), or a manifest file."""
    if report.get("jar"):
        text = f"the job jar <code>{escape_html(report['jar'])}</code>"
        if report.get("overlay"):
            text += (f", completed by the overlay <code>{escape_html(report['overlay'])}</code> (migrations, "
                     "renames, Row field names)")
        return text
    if report.get("manifest") is None:
        return "a manifest built in memory (no file)"
    return f"the manifest <code>{escape_html(report['manifest'])}</code>"


def _verdicts(report: Mapping[str, Any], verdict: Verdict | None) -> str:
    """Flink's verdict beside the tool's: what Flink does on its own with the savepoint as it is, and the plan."""
    trial = report.get("trial") if isinstance(report.get("trial"), Mapping) else None
    head = ("<tr><th>Flink on its own, restoring the savepoint as it is</th>"
            "<th>flinkstate: the plan <code>flinkstate migrate</code> runs</th>"
            + ("<th>Flink's own trial restore</th>" if trial else "") + "</tr>")
    cells = _verdict_cell(report["flink_verdict"]) + _verdict_cell(report["verdict"])
    if trial:
        count = trial.get("disagreements", 0)
        cells += (f'<td class="verdict v-{"incompatible" if count else "as-is"}">{escape_html(count)} '
                  f"disagreement{'' if count == 1 else 's'} with the check</td>")
    note = {"migrate": "flinkstate migrate runs the plan; the new version restores its output as is.",
            "incompatible": "flinkstate migrate refuses (see the findings)."}.get(report["outcome"], "")
    if report["outcome"] == "incompatible" and verdict is not None and verdict < INCOMPATIBLE:
        note = (f"The planned migration fails in the dry run (below), although the serializer snapshots alone allow "
                f"it ({report['verdict']}).")
    return (f'<table class="verdicts">{head}<tr>{cells}</tr></table>'
            + (f'<p class="note">{escape_html(note)}</p>' if note else ""))


# -- per operator and state ---------------------------------------------------------------------------------------


def _states(report: Mapping[str, Any]) -> str:
    trial = isinstance(report.get("trial"), Mapping)
    head = ["operator", "state", "kind", "status", "new type from", "old type", "new type", "Flink as is", "verdict",
            "migration", *(["Flink's trial"] if trial else [])]
    rows = []
    for row in report["states"]:
        old_types, new_types = _types_of(row.get("old_types")), _types_of(row.get("new_types"))
        if _kept_as_written(row):
            # Not the new version's to change: Flink restores it with the serializer the savepoint holds.
            old_html, new_html = type_diff(old_types, old_types)[0], '<span class="note">as written (kept)</span>'
        else:
            old_html, new_html = type_diff(old_types, new_types)
        cells = [escape_html(row.get("operator", "")), escape_html(row.get("state") or "—"), _kind(row),
                 escape_html(row.get("status", "")), _type_from(row, report), old_html, new_html]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells[:5])
                    + f'<td class="type">{cells[5]}</td><td class="type">{cells[6]}</td>'
                    + _verdict_cell(row.get("flink_verdict")) + _verdict_cell(row.get("verdict"))
                    + f"<td>{escape_html(row.get('migration') or '')}</td>"
                    + (f"<td>{escape_html(row.get('flink_trial') or '')}</td>" if trial else "") + "</tr>")
    return ("<h2>States</h2>"
            '<p class="note">Old and new types side by side: <del>struck out</del> is only in the savepoint, '
            "<ins>highlighted</ins> only in the new version.</p>"
            '<table class="states"><tr>' + "".join(f"<th>{h}</th>" for h in head) + "</tr>" + "".join(rows)
            + "</table>")


def _types_of(types: Any) -> dict[str, str]:
    return {str(k): str(v) for k, v in types.items()} if isinstance(types, Mapping) else {}


def _kind(row: Mapping[str, Any]) -> str:
    old, new = row.get("old_kind"), row.get("kind")
    if old and new and old != new:
        return f"<del>{escape_html(old)}</del> → <ins>{escape_html(new)}</ins>"
    return escape_html(new or old or "")


def _type_from(row: Mapping[str, Any], report: Mapping[str, Any]) -> str:
    """Where the row's new type comes from: the new version's jar or manifest; for a state the new version does not
    declare or register, the savepoint (Flink restores it with the serializer it wrote)."""
    if _kept_as_written(row):
        return "savepoint"
    if not row.get("new_types"):
        return "—"
    if report.get("jar"):
        return "jar"
    return "manifest" if report.get("manifest") is not None else "manifest (in memory)"


def _kept_as_written(row: Mapping[str, Any]) -> bool:
    """A state the new version neither declares nor registers: Flink restores it as the savepoint wrote it."""
    return bool(row.get("old_types")) and not row.get("new_types") \
        and row.get("status") in ("not-declared", "not-registered")


def type_diff(old: Mapping[str, str], new: Mapping[str, str]) -> tuple[str, str]:
    """The old and the new types of a state as two HTML cells, the differences marked: what only the old has in
    ``<del>``, what only the new has in ``<ins>`` (token by token: a field's name, a type, a sign)."""
    keys = [k for k in _TYPE_KEYS if k in old or k in new] + [k for k in {**old, **new} if k not in _TYPE_KEYS]
    labelled = set(old) | set(new) != {"value"}
    old_lines, new_lines = [], []
    for key in keys:
        label = f"{escape_html(key)}: " if labelled else ""
        if key not in new:
            old_lines.append(f"{label}<del>{escape_html(old[key])}</del>")
        elif key not in old:
            new_lines.append(f"{label}<ins>{escape_html(new[key])}</ins>")
        else:
            before, after = _token_diff(old[key], new[key])
            old_lines.append(label + before)
            new_lines.append(label + after)
    return "\n".join(old_lines), "\n".join(new_lines)


def _token_diff(old: str, new: str) -> tuple[str, str]:
    a, b = _TYPE_TOKENS.findall(old), _TYPE_TOKENS.findall(new)
    before, after = [], []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        gone, came = escape_html("".join(a[i1:i2])), escape_html("".join(b[j1:j2]))
        if op == "equal":
            before.append(gone)
            after.append(came)
            continue
        if gone:
            before.append(f"<del>{gone}</del>")
        if came:
            after.append(f"<ins>{came}</ins>")
    return "".join(before), "".join(after)


# -- findings -----------------------------------------------------------------------------------------------------


def _findings(findings: list[Mapping[str, Any]]) -> str:
    if not findings:
        return "<h2>Findings (0)</h2><p>None: every state restores as is.</p>"
    rows = []
    for finding in findings:
        code = str(finding.get("code", ""))
        where = " / ".join(str(part) for part in (finding.get("operator"), finding.get("state"), finding.get("path"))
                           if part)
        change = ""
        old, new = finding.get("old_type"), finding.get("new_type")
        if old and new:
            change = f'<div class="type"><del>{escape_html(old)}</del> → <ins>{escape_html(new)}</ins></div>'
        elif new:
            change = f'<div class="type">new: <ins>{escape_html(new)}</ins></div>'
        elif old:
            change = f'<div class="type">was: <del>{escape_html(old)}</del></div>'
        flags = []
        if finding.get("silent_misread"):
            flags.append('<span class="flag silent">silent: Flink would not fail</span>')
        verdict = _verdict(finding.get("verdict"))
        effective = INCOMPATIBLE if finding.get("silent_misread") else verdict
        if effective is not None and effective >= Verdict.COMPATIBLE_AFTER_MIGRATION:
            migratable = {True: "migratable", False: "not migratable",
                          None: "migration declared, not evaluated"}.get(finding.get("migratable"), "")
            flags.append(f'<span class="flag">{migratable}</span>')
        rows.append(f"<tr><td><code>{escape_html(code)}</code><div class=\"explanation\">"
                    f"{escape_html(explain(code))}</div></td><td>{escape_html(where)}</td>"
                    + _verdict_cell(finding.get("verdict"))
                    + f"<td>{escape_html(finding.get('message', ''))}{change}{''.join(flags)}</td></tr>")
    return (f"<h2>Findings ({len(findings)})</h2>"
            '<table class="findings"><tr><th>code</th><th>where</th><th>Flink</th><th>what changed</th></tr>'
            + "".join(rows) + "</table>")


# -- the dry run, the trial restore, the verification -------------------------------------------------------------


def _dry_run(section: Mapping[str, Any], outcome: str) -> str:
    if not section.get("ran"):
        return f"<h2>Dry run</h2><p>Not run: {escape_html(section.get('reason', ''))}.</p>"
    entries, seconds = section.get("entries", 0), section.get("seconds", 0)
    parts = ["<h2>Dry run</h2>",
             f'<p class="dry-run-summary">{escape_html(entries)} entries decoded and migrated in memory '
             f"({escape_html(section.get('tasks', ''))} tasks) in {escape_html(seconds)} s; "
             f"{escape_html(section.get('failures', 0))} failed.</p>"]
    if section.get("failed_under_fail_policy"):
        parts.append('<p class="warning">The migration would fail: entries fail in a state whose policy is '
                     "<code>fail</code>.</p>")
    if section.get("too_many_dead_letters"):
        parts.append(f'<p class="warning">The migration would fail: {escape_html(section.get("dead_letters"))} '
                     f"entries would be dead-lettered, more than the limit of "
                     f"{escape_html(section.get('max_dead_letters'))} (<code>--max-dead-letters</code>).</p>")
    if outcome == "migrate" and isinstance(entries, int) and entries > 0 and isinstance(seconds, (int, float)) \
            and seconds > 0:
        parts.append(f'<p class="downtime">Estimated downtime of the migration step: at least '
                     f"{escape_html(seconds)} s, at the rate the dry run measured ({entries / seconds:,.0f} entries/s: "
                     "decode and migrate in memory); the migration also writes and verifies every entry while the "
                     "job is down, and the stop and the new job's start come on top.</p>")
    states = section.get("states")
    counts: Mapping[str, Any] = states if isinstance(states, Mapping) else {}
    parts.append('<table class="dry-run"><tr><th>state</th><th>read</th><th>converted</th><th>failed</th></tr>'
                 + "".join(f"<tr><td>{escape_html(name)}</td>" + "".join(
                     f"<td>{escape_html(c.get(k, '')) if isinstance(c, Mapping) else ''}</td>"
                     for k in ("read", "converted", "failed")) + "</tr>" for name, c in counts.items())
                 + "</table>")
    examples = [e for e in section.get("examples") or [] if isinstance(e, Mapping)]
    if examples:
        parts.append("<p>Failing entries (first few):</p>"
                     '<table class="failures"><tr><th>operator / state</th><th>key</th><th>user key</th>'
                     "<th>on error</th><th>error</th></tr>"
                     + "".join(f"<tr><td>{escape_html(e.get('operator', ''))} / {escape_html(e.get('state', ''))}"
                               f"</td><td><code>{escape_html(_json(e.get('key')))}</code></td>"
                               f"<td><code>{escape_html(_json(e['user_key'])) if 'user_key' in e else ''}</code></td>"
                               f"<td>{escape_html(e.get('on_error', ''))}</td>"
                               f"<td>{escape_html(e.get('error', ''))}</td></tr>" for e in examples)
                     + "</table>")
    return "".join(parts)


def _json(value: Any) -> str:
    return json.dumps(value)


def _trial(trial: Mapping[str, Any], states: list[Mapping[str, Any]]) -> str:
    groups = {"one": "one key group of each operator", "all": "all key groups"}.get(str(trial.get("key_groups")),
                                                                                     str(trial.get("key_groups")))
    parts = ["<h2>Flink's own trial restore</h2>",
             f"<p>The savepoint restored into the jar's operators with Flink's own classes: jar "
             f"<code>{escape_html(trial.get('jar', ''))}</code>, backend {escape_html(trial.get('backend', ''))}, "
             f"{escape_html(groups)}, {escape_html(trial.get('seconds', ''))} s: "
             f"{escape_html(trial.get('disagreements', 0))} disagreements with the check.</p>"]
    disagreeing = [row for row in states if "TRIAL_DISAGREES" in (row.get("findings") or [])]
    if disagreeing:
        parts.append('<table class="disagreements"><tr><th>operator</th><th>state</th><th>Flink\'s answer</th>'
                     "<th>the check's Flink verdict</th></tr>"
                     + "".join(f"<tr><td>{escape_html(r.get('operator', ''))}</td><td>"
                               f"{escape_html(r.get('state') or '—')}</td><td>{escape_html(r.get('flink_trial') or '')}"
                               f"</td>{_verdict_cell(r.get('flink_verdict'))}</tr>" for r in disagreeing)
                     + "</table>")
    return "".join(parts)


def _verification(report: Mapping[str, Any]) -> str:
    parts = ["<h2>Verification against the source savepoint</h2>"]
    if report.get("verified_against") is not None:
        parts.append(f'<p class="verified-against">Source savepoint: <code>{escape_html(report["verified_against"])}'
                     "</code></p>")
    if report.get("verification_error"):
        parts.append(f'<p class="warning">FAILED: {escape_html(report["verification_error"])}</p>')
    lines = report.get("verification")
    if isinstance(lines, list) and lines:
        parts.append('<ul class="verification">' + "".join(f"<li>{escape_html(line)}</li>" for line in lines)
                     + "</ul>")
    return "".join(parts)


# -- verdicts -------------------------------------------------------------------------------------------------------


def _verdict(name: Any) -> Verdict | None:
    return Verdict.__members__.get(name) if isinstance(name, str) else None


def _verdict_cell(name: Any) -> str:
    """A verdict in words, in the colour of its class; a name this version does not know is shown as it is."""
    verdict = _verdict(name)
    if verdict is None:
        return f'<td class="verdict v-unknown">{escape_html(name if name is not None else "")}</td>'
    return f'<td class="verdict v-{_VERDICT_CLASS[verdict]}">{VERDICT_WORDS[verdict]}</td>'


__all__ = ["ReportFormatError", "render_html", "type_diff"]

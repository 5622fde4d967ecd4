"""The compatibility report: one row per (operator, state) with Flink's verdict and the tool's, the findings, and
their renderings: JSON for machines (``report_version`` 1) and Markdown for people and alerts.

Two verdicts per row:

* ``flink_verdict``: what Flink answers when the new version registers the state, restoring the savepoint as it is;
* ``verdict``: what the upgrade will do, which is the plan ``flinkstate migrate`` runs
  (:mod:`flinkstate.migration.verdict`): as is or reconfigured (the state keeps its bytes), after migration (the plan
  rewrites it, and its output restores as is), or incompatible (migrate refuses it: no plan, or a plan whose output
  would still not restore, e.g. a silent misread it leaves in place).

Exit status of ``flinkstate check``: 0 restorable as is or reconfigured; 3 migration required and possible
(``migrate`` runs the plan and its output checks 0); 4 incompatible (``migrate`` refuses); 1 error; 2 usage.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from typing import Any

from flinkstate.compatibility import AFTER_MIGRATION, AS_IS, INCOMPATIBLE, Finding, Verdict
from flinkstate.errors import printable

REPORT_VERSION = 1
EXIT_OK = 0
EXIT_MIGRATION = 3
EXIT_INCOMPATIBLE = 4


@dataclass
class StateRow:
    """One keyed state (or an operator without keyed state, ``state`` None) as the check sees it."""

    operator: str
    state: str | None
    status: str  # "kept", "renamed", "added", "removed", "dropped", "not-declared", "operator-removed", ...
    kind: str | None = None
    old_kind: str | None = None
    old_types: dict[str, str] = field(default_factory=dict)
    new_types: dict[str, str] = field(default_factory=dict)
    flink_verdict: Verdict = AS_IS
    verdict: Verdict = AS_IS
    migration: str | None = None  # "flink", "declared", "declared (possible: ...)", ...
    findings: list[Finding] = field(default_factory=list)
    #: Flink's own answer in the trial restore (``check --trial``: :mod:`flinkstate.migration.trial`), when one ran.
    trial: str | None = None

    @property
    def migration_possible(self) -> bool:
        """Whether the state restores, directly or after the planned migration."""
        return self.verdict < INCOMPATIBLE

    def to_json(self) -> dict[str, Any]:
        return {"operator": self.operator, "state": self.state, "status": self.status, "kind": self.kind,
                "old_kind": self.old_kind, "old_types": self.old_types, "new_types": self.new_types,
                "flink_verdict": self.flink_verdict.name, "verdict": self.verdict.name,
                "migration": self.migration, "migration_possible": self.migration_possible,
                "findings": [f.code for f in self.findings],
                **({"flink_trial": self.trial} if self.trial is not None else {})}


@dataclass
class Report:
    savepoint: str
    manifest: str | None
    rows: list[StateRow] = field(default_factory=list)
    backend: str | None = None
    allow_non_restored_state: bool = False
    #: The data-level dry run's section (:mod:`flinkstate.migration.dry_run`), when one ran or was declined.
    dry_run: dict[str, Any] | None = None
    #: Where the dry run ran, for the Markdown ("one process", "Spark").
    dry_run_runner: str = "one process"
    #: The trial restore's section (``check --trial``: jar, backend, key groups, seconds, disagreements), when one ran.
    trial: dict[str, Any] | None = None
    #: The job jar whose operators gave the new version's types, and the overlay that completed them, when the schema
    #: is a jar's (:attr:`flinkstate.manifest.Manifest.jar`): in the JSON, so that a rendering of it names both.
    jar: str | None = None
    overlay: str | None = None

    @property
    def findings(self) -> list[Finding]:
        return [f for row in self.rows for f in row.findings]

    @property
    def flink_verdict(self) -> Verdict:
        return max((row.flink_verdict for row in self.rows), default=AS_IS)

    @property
    def verdict(self) -> Verdict:
        return max((row.verdict for row in self.rows), default=AS_IS)

    @property
    def migration_possible(self) -> bool:
        return all(row.migration_possible for row in self.rows)

    @property
    def outcome(self) -> str:
        """``restore`` (as is / reconfigured), ``migrate`` (required and possible) or ``incompatible``."""
        if self.verdict <= Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER:
            return "restore"
        outcome = "migrate" if self.verdict is AFTER_MIGRATION else "incompatible"
        if self.dry_run is not None:
            outcome = outcome_after_dry_run(outcome, self.dry_run)
        return outcome

    @property
    def exit_code(self) -> int:
        return {"restore": EXIT_OK, "migrate": EXIT_MIGRATION, "incompatible": EXIT_INCOMPATIBLE}[self.outcome]

    def to_json(self) -> dict[str, Any]:
        return {
            "report_version": REPORT_VERSION,
            "savepoint": self.savepoint,
            "manifest": self.manifest,
            **({"jar": self.jar, "overlay": self.overlay} if self.jar is not None else {}),
            "backend": self.backend or "any",
            "allow_non_restored_state": self.allow_non_restored_state,
            "flink_verdict": self.flink_verdict.name,
            "verdict": self.verdict.name,
            "outcome": self.outcome,
            "exit_code": self.exit_code,
            "states": [row.to_json() for row in self.rows],
            "findings": [f.to_json() for f in self.findings],
            **({"dry_run": self.dry_run} if self.dry_run is not None else {}),
            **({"trial": self.trial} if self.trial is not None else {}),
        }

    def render_json(self) -> str:
        return json.dumps(self.to_json(), indent=2)

    def render_markdown(self) -> str:
        headline = headline_text(self.outcome, self.verdict, self.dry_run is not None)
        lines = [f"# Compatibility check: {headline}", "",
                 f"- savepoint: `{escape_markdown(self.savepoint)}`", _manifest_line(self.manifest),
                 _verdict_line(self),
                 f"- Flink on its own, restoring the savepoint as it is: {self.flink_verdict.name}"]
        trial = self.trial is not None
        if self.trial is not None:
            lines.append(f"- Flink's own trial restore ({escape_markdown(str(self.trial['backend']))}, "
                         f"{_KEY_GROUPS[self.trial['key_groups']]}, {self.trial['seconds']} s): "
                         f"{self.trial['disagreements']} disagreements with the tool")
        lines += ["", "| operator | state | kind | old type | new type | Flink as is | verdict | migration |"
                  + (" Flink's trial |" if trial else ""),
                  "|---|---|---|---|---|---|---|---|" + ("---|" if trial else "")]
        for row in self.rows:
            kind = row.kind or row.old_kind or ""
            if row.old_kind and row.kind and row.old_kind != row.kind:
                kind = f"{row.old_kind} → {row.kind}"
            lines.append("| " + " | ".join([
                _cell(row.operator), _cell(row.state or "—"), kind, _cell(_types(row.old_types)),
                _cell(_types(row.new_types)), _short(row.flink_verdict), _short(row.verdict),
                _cell(row.migration or ""), *([_cell(row.trial or "")] if trial else [])]) + " |")
        findings = self.findings
        lines += ["", f"## Findings ({len(findings)})", ""]
        if not findings:
            lines.append("None: every state restores as is.")
        for f in findings:
            where = escape_markdown(" / ".join(part for part in (f.operator, f.state, f.path) if part))
            flags = []
            if f.silent_misread:
                flags.append("**silent: Flink would not fail**")
            if f.effective_verdict >= AFTER_MIGRATION:
                flags.append({True: "migratable", False: "not migratable",
                              None: "migration declared, not evaluated"}[f.migratable])
            if f.old_type and f.new_type:
                change = f" (`{escape_markdown(f.old_type)}` → `{escape_markdown(f.new_type)}`)"
            elif f.new_type:
                change = f" (new: `{escape_markdown(f.new_type)}`)"
            elif f.old_type:
                change = f" (was: `{escape_markdown(f.old_type)}`)"
            else:
                change = ""
            lines.append(f"- `{f.code}` at `{where}`: {_short(f.verdict)}. {escape_markdown(f.message)}{change}"
                         + (f" [{'; '.join(flags)}]" if flags else ""))
        text = "\n".join(lines) + "\n"
        if self.dry_run is not None:
            text += render_dry_run(self.dry_run, self.dry_run_runner)
        elif self.outcome == "migrate":
            text += ("\nThe migration was planned from the serializer snapshots only; run the check with "
                     "`--dry-run` to decode and migrate every entry in memory first.\n")
        return text


_KEY_GROUPS = {"one": "one key group of each operator", "all": "all key groups"}
_OUTCOME_TEXT = {"restore": "restorable", "migrate": "migration required and possible",
                 "incompatible": "INCOMPATIBLE"}
#: A verdict in a table cell, in words (the Markdown makes INCOMPATIBLE bold; the HTML report colours each).
VERDICT_WORDS = {Verdict.COMPATIBLE_AS_IS: "as is", Verdict.COMPATIBLE_WITH_RECONFIGURED_SERIALIZER: "reconfigured",
                 Verdict.COMPATIBLE_AFTER_MIGRATION: "after migration", INCOMPATIBLE: "INCOMPATIBLE"}


def headline_text(outcome: str, verdict: Verdict, dry_run: bool) -> str:
    """The report's headline for its outcome (``restore``, ``migrate``, ``incompatible``): an outcome made
    incompatible by the dry run although the snapshots allow the plan says so."""
    headline = _OUTCOME_TEXT[outcome]
    if outcome == "incompatible" and verdict < INCOMPATIBLE and dry_run:
        headline += " (the dry run shows the migration would fail)"
    return headline


def summary_lines(report: Any) -> list[str]:
    """A check report (its JSON form) in a few plain lines for a log: the headline, then each state that does not
    restore as it is, with its verdict and migration. Names escaped; a document that is not a report: one line."""
    if not isinstance(report, dict) or report.get("outcome") not in _OUTCOME_TEXT:
        return ["(not a check report)"]
    verdict = Verdict.__members__.get(str(report.get("verdict")), INCOMPATIBLE)
    lines = [f"compatibility check: {headline_text(report['outcome'], verdict, 'dry_run' in report)} "
             f"(verdict {verdict.name})"]
    for row in report.get("states") or []:
        if not isinstance(row, dict) or row.get("verdict") == AS_IS.name:
            continue
        name = f"{row.get('operator')}/{row.get('state')}" if row.get("state") else f"{row.get('operator')}"
        migration = f", migration: {row['migration']}" if row.get("migration") else ""
        lines.append(f"  {printable(name)}: {printable(row.get('verdict'))} ({printable(row.get('status'))}"
                     f"{printable(migration)})")
    return lines


def _verdict_line(report: Report) -> str:
    """The verdict under the headline, always the headline's: the tool's, i.e. the plan ``flinkstate migrate`` runs
    (Flink's own verdict follows on its own line, named as such)."""
    if report.outcome == "incompatible" and report.verdict < INCOMPATIBLE:
        return (f"- verdict: **{INCOMPATIBLE.name}**: the planned migration fails in the dry run (below), although "
                f"the serializer snapshots alone allow it ({report.verdict.name})")
    note = {"migrate": ": `flinkstate migrate` runs the plan; the new version restores its output as is",
            "incompatible": ": `flinkstate migrate` refuses (see the findings)"}.get(report.outcome, "")
    return f"- verdict: **{report.verdict.name}**{note}"


def _short(verdict: Verdict) -> str:
    words = VERDICT_WORDS[verdict]
    return f"**{words}**" if verdict is INCOMPATIBLE else words


def _types(types: dict[str, str]) -> str:
    if set(types) == {"value"}:
        return types["value"]
    return "; ".join(f"{k} {v}" for k, v in types.items())


def _manifest_line(manifest: str | None) -> str:
    # A manifest built in memory (parse_manifest, manifest_from_savepoint) has no file: say so rather than `None`.
    return f"- manifest: `{escape_markdown(manifest)}`" if manifest is not None else "- manifest: (in memory, no file)"


def _cell(text: str) -> str:
    return escape_markdown(text)


def escape_markdown(text: str) -> str:
    """Text from a savepoint or manifest (names, types, errors) made safe for one Markdown line: control characters
    escaped (:func:`~flinkstate.errors.printable`), table pipes and backticks neutralised, and a link or image
    (``[text](url)``, whose text could hide its target) broken as the alerts break it (``] (``)."""
    return printable(text).replace("|", "\\|").replace("`", "'").replace("](", "] (")


def escape_html(text: object) -> str:
    """Text from a savepoint or manifest (names, types, errors), or from a report file, made safe for HTML text and
    quoted attribute values: control characters and bidi overrides escaped (:func:`~flinkstate.errors.printable`),
    then ``&``, ``<``, ``>``, ``"`` and ``'`` written as character references, so that no name creates an element or
    an attribute, or ends one."""
    return html.escape(printable(text), quote=True)


def slack_text(text: str) -> str:
    """A message for a Slack-style chat (Slack's incoming webhooks, and those compatible with them), whatever names
    it carries: each line made printable (:func:`~flinkstate.errors.printable`), ``&``, ``<`` and ``>`` written
    as Slack asks (``&amp;``, ``&lt;``, ``&gt;``: no ``<!channel>`` or ``<!everyone>`` mention, no ``<@user>``, no
    ``<url|text>`` link whose text hides its target), Markdown's link ``[text](url)`` broken (``] (``) for the
    chats that render Markdown, and a plain ``@channel`` / ``@here`` / ``@everyone`` / ``@all`` written with a
    fullwidth at sign, U+FF20 (chats that ping on plain text). Every alert goes out through this rule; Slack shows
    ``&lt;`` as ``<``, so the text reads as written, as plain text."""
    lines = (printable(line) for line in str(text).split("\n"))
    return "\n".join(_BROADCAST.sub("\uff20\\1", line.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
                                    .replace("](", "] (")) for line in lines)


#: A plain-text broadcast mention, which some Slack-compatible chats (Mattermost, Rocket.Chat, Discord's @everyone)
#: turn into a notification of everyone: its @ becomes U+FF20 (fullwidth), which reads the same and notifies nobody.
_BROADCAST = re.compile(r"@(channel|here|everyone|all)\b", re.IGNORECASE)


# -- the dry run's section (its figures come from flinkstate.migration.dry_run.summarize) ----------------


def outcome_after_dry_run(outcome: str, section: dict[str, Any]) -> str:
    """A migration that would fail (an entry under the ``fail`` policy, or more dead letters than allowed) is not
    possible: ``migrate`` becomes ``incompatible``."""
    if outcome == "migrate" and (section.get("plan_error") or (section.get("ran") and (
            section.get("failed_under_fail_policy") or section.get("too_many_dead_letters")))):
        return "incompatible"
    return outcome


def render_dry_run(section: dict[str, Any], runner: str = "one process") -> str:
    """The Markdown section appended to the check report."""
    if not section.get("ran"):
        return f"\n## Dry run\n\nNot run: {section['reason']}.\n"
    lines = ["", "## Dry run", "",
             f"{section['entries']} entries decoded and migrated in memory ({section['tasks']} tasks, {runner}) in "
             f"{section['seconds']} s; {section['failures']} failed.", ""]
    if section.get("failed_under_fail_policy"):
        lines += ["**The migration would fail**: entries fail in a state whose policy is `fail`.", ""]
    if section.get("too_many_dead_letters"):
        lines += [f"**The migration would fail**: {section['dead_letters']} entries would be dead-lettered, more "
                  f"than the limit of {section['max_dead_letters']} (`--max-dead-letters`).", ""]
    lines += ["| state | read | converted | failed |", "|---|---|---|---|"]
    lines += [f"| {escape_markdown(name)} | {c['read']} | {c['converted']} | {c['failed']} |"
              for name, c in section["states"].items()]
    if section["examples"]:
        lines += ["", "Failing entries (first few):", ""]
        lines += [f"- `{escape_markdown(e['operator'])}/{escape_markdown(e['state'])}` key "
                  f"`{escape_markdown(json.dumps(e['key']))}` ({e.get('on_error')}): {escape_markdown(e['error'])}"
                  for e in section["examples"]]
    return "\n".join(lines) + "\n"


__all__ = ["EXIT_INCOMPATIBLE", "EXIT_MIGRATION", "EXIT_OK", "REPORT_VERSION", "VERDICT_WORDS", "Report", "StateRow",
           "escape_html", "escape_markdown", "headline_text", "outcome_after_dry_run", "render_dry_run", "slack_text",
           "summary_lines"]

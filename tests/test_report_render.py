"""The check report's Markdown head: where the savepoint and the manifest came from, and the one verdict under the
headline (Flink's own beside it, as such)."""

from __future__ import annotations

import re

import pytest

from flinkstate import Report
from flinkstate.compatibility import AFTER_MIGRATION, AS_IS, INCOMPATIBLE, RECONFIGURED, Verdict
from flinkstate.report import StateRow, summary_lines


def test_a_manifest_from_a_file_is_named() -> None:
    text = Report("/savepoints/savepoint-1", "jobs/v2 | new.yaml").render_markdown()
    assert "- savepoint: `/savepoints/savepoint-1`\n- manifest: `jobs/v2 \\| new.yaml`\n" in text


def test_a_manifest_built_in_memory_is_said_to_be_so() -> None:
    # parse_manifest and manifest_from_savepoint give a Manifest without a file: its path is None, which the report
    # once rendered as `None`, as if a file of that name had been read.
    text = Report("/savepoints/savepoint-1", None).render_markdown()
    assert "- manifest: (in memory, no file)\n" in text
    assert "`None`" not in text


#: The headline of each outcome and the verdicts that may stand under it.
HEADLINE_VERDICTS = {"restorable": {"COMPATIBLE_AS_IS", "COMPATIBLE_WITH_RECONFIGURED_SERIALIZER"},
                     "migration required and possible": {"COMPATIBLE_AFTER_MIGRATION"},
                     "INCOMPATIBLE": {"INCOMPATIBLE"}}
FAILED_DRY_RUN = {"ran": True, "failed_under_fail_policy": True, "entries": 4, "tasks": 1, "seconds": 0.1,
                  "failures": 1, "states": {"stats": {"read": 4, "converted": 3, "failed": 1}}, "examples": []}


@pytest.mark.parametrize(("flink", "plan", "dry_run", "headline"), [
    (INCOMPATIBLE, AFTER_MIGRATION, None, "migration required and possible"),  # the sample job's v3 with a conversion
    (AFTER_MIGRATION, AFTER_MIGRATION, None, "migration required and possible"),  # v2: Flink migrates it too
    (INCOMPATIBLE, INCOMPATIBLE, None, "INCOMPATIBLE"),
    (AS_IS, INCOMPATIBLE, None, "INCOMPATIBLE"),  # a silent misread: Flink restores it, wrongly
    (RECONFIGURED, RECONFIGURED, None, "restorable"),
    (INCOMPATIBLE, AFTER_MIGRATION, FAILED_DRY_RUN, "INCOMPATIBLE"),  # the plan, whose dry run fails
], ids=["migrate-flink-refuses", "migrate-flink-migrates", "incompatible", "silent-misread", "reconfigured",
        "dry-run-fails"])
def test_the_verdict_under_the_headline_is_the_headlines(flink: Verdict, plan: Verdict, dry_run: dict | None,
                                                         headline: str) -> None:
    """One verdict under the headline, the tool's (the plan migrate runs), never one that contradicts it; Flink's
    own verdict on its own line, named as what Flink does unaided."""
    row = StateRow("stats", "stats", "kept", kind="VALUE", flink_verdict=flink, verdict=plan)
    text = Report("/savepoints/savepoint-1", "v2.yaml", [row], dry_run=dry_run).render_markdown()
    head = text.split("\n\n|", 1)[0].splitlines()
    assert head[0] == f"# Compatibility check: {headline}" or head[0].startswith(f"# Compatibility check: {headline} ")
    shown = re.findall(r"\*\*([A-Z_]+)\*\*", "\n".join(head))
    assert len(shown) == 1 and shown[0] in HEADLINE_VERDICTS[headline], head
    assert head[4].startswith(f"- verdict: **{shown[0]}**"), head
    assert head[5] == f"- Flink on its own, restoring the savepoint as it is: {flink.name}", head


def test_the_summary_for_a_task_log_is_the_headline_and_the_states_that_need_more_than_a_restore() -> None:
    """What the DAG's choose_path logs (Airflow's log tab): the report's own headline and verdict, then only the
    states that do not restore as they are, names escaped; anything that is not a report is one line."""
    rows = [StateRow("stats", "stats", "kept", kind="VALUE", flink_verdict=INCOMPATIBLE, verdict=AFTER_MIGRATION,
                     migration="declared"),
            StateRow("stats", "seen", "kept", kind="VALUE"),
            StateRow("evil\x1b[2J", "x\ny", "added", kind="VALUE", verdict=RECONFIGURED)]
    report = Report("/savepoints/savepoint-1", "v2.yaml", rows)
    assert summary_lines(report.to_json()) == [
        "compatibility check: migration required and possible (verdict COMPATIBLE_AFTER_MIGRATION)",
        "  stats/stats: COMPATIBLE_AFTER_MIGRATION (kept, migration: declared)",
        "  evil\\x1b[2J/x\\ny: COMPATIBLE_WITH_RECONFIGURED_SERIALIZER (added)"]
    assert report.render_markdown().splitlines()[0] == "# " + summary_lines(report.to_json())[0].split(" (")[0] \
        .replace("compatibility check", "Compatibility check")
    assert summary_lines({"outcome": "maybe"}) == summary_lines([]) == ["(not a check report)"]

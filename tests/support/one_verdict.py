"""The property every upgrade case must hold (issue 23, "one verdict"): ``check``'s exit status is what ``migrate``
does with the same inputs.

* exit 4: ``migrate`` refuses, in one line naming the operator ``check`` blames, and publishes nothing;
* exit 0 or 3: ``migrate`` publishes, and ``check`` of its output (``migrated=True``) says 0 against the same
  manifest;
* exit 0: ``migrate`` keeps every keyed state's header byte for byte (nothing needed rewriting).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from flinkstate import check
from flinkstate.format.keyed_header import state_meta_bytes
from flinkstate.migration.code_policy import CodePolicy
from flinkstate.migration.job import MigrationJob
from flinkstate.migration.plan import MigrationError
from flinkstate.migration.verdict import blocking_finding
from flinkstate.report import Report
from flinkstate.savepoint import Savepoint


def assert_one_verdict(savepoint: Path, manifest: Path, output: Path, *, previous: Path | None = None,
                       allow_code: str | None = None) -> Report:
    """Runs check, then migrate to ``output``, and asserts the property; returns check's report."""
    report = check(savepoint, manifest, previous=previous)
    job = MigrationJob(str(savepoint), str(manifest), str(output), old_schema=str(previous) if previous else None,
                       allow_code=CodePolicy.resolve(allow_code))
    if report.exit_code == 4:
        blocked = blocking_finding(report)
        assert blocked is not None, report.render_markdown()
        with pytest.raises(MigrationError) as refused:
            job.run()
        assert len(str(refused.value).splitlines()) == 1, refused.value
        assert blocked[0].operator in str(refused.value) or _operator_id(savepoint, blocked[0].operator) in \
            str(refused.value), (refused.value, report.render_markdown())
        assert not output.exists()
        return report
    job.run()
    written = check(output, manifest, migrated=True)
    assert written.exit_code == 0, written.render_markdown()
    if report.exit_code == 0:
        source, migrated = Savepoint.open(savepoint), Savepoint.open(output)
        for op in source.operators:
            before, after = source.keyed_header(op), migrated.keyed_header(op.operator_id)
            assert (before is None) == (after is None)
            if before is not None and after is not None:
                assert [state_meta_bytes(s) for s in before.states] == [state_meta_bytes(s) for s in after.states]
    return report


def _operator_id(savepoint: Path, label: str) -> str:
    try:
        return Savepoint.open(savepoint).operator(label).operator_id
    except Exception:
        return label

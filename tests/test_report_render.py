"""The check report's Markdown head: where the savepoint and the manifest came from."""

from __future__ import annotations

from flinkstate import Report


def test_a_manifest_from_a_file_is_named() -> None:
    text = Report("/savepoints/savepoint-1", "jobs/v2 | new.yaml").render_markdown()
    assert "- savepoint: `/savepoints/savepoint-1`\n- manifest: `jobs/v2 \\| new.yaml`\n" in text


def test_a_manifest_built_in_memory_is_said_to_be_so() -> None:
    # parse_manifest and manifest_from_savepoint give a Manifest without a file: its path is None, which the report
    # once rendered as `None`, as if a file of that name had been read.
    text = Report("/savepoints/savepoint-1", None).render_markdown()
    assert "- manifest: (in memory, no file)\n" in text
    assert "`None`" not in text

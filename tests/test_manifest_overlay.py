"""Issue 25: the overlay (flinkstate/manifest_overlay.py), without a JVM. The jar's manifest here is a hand-written
manifest of the version standing in for what ``schema --jar`` gives (the same types, byte for byte:
tests/test_jar_check.py runs the real jars): the overlay completes it, and every place where it contradicts it is
one line naming the overlay, the path, the operator, the state, the field and both sides."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from flinkstate import (
    Manifest,
    ManifestError,
    OverlayContradiction,
    apply_overlay,
    load_manifest,
    parse_manifest,
    parse_overlay,
)
from flinkstate.serializers.row import RowSnapshot

ROOT = Path(__file__).resolve().parent.parent
MANIFESTS = ROOT / "examples" / "sample-job" / "manifests"
V2_OVERLAY = MANIFESTS / "v2-overlay.yaml"
JAR = "sample-job.jar"


def jar_manifest(version: str, rename: tuple[str, str] | None = None) -> Manifest:
    """The manifest of the sample job's ``version`` as its jar gives it (``jar`` set; no migrations, renames or Row
    field names), optionally with a state renamed."""
    text = (MANIFESTS / f"{version}.yaml").read_text()
    if rename is not None:
        text = text.replace(f"      {rename[0]}:", f"      {rename[1]}:")
    manifest = unnamed(parse_manifest(text, JAR))
    manifest.path = manifest.jar = JAR
    for op in manifest.operators.values():
        for state in op.states.values():
            state.migration = None
    return manifest


def unnamed(manifest: Manifest) -> Manifest:
    """``manifest`` with its (top-level) Row types' field names taken out, as savepoints and jars have them."""
    for op in manifest.operators.values():
        for state in op.states.values():
            if isinstance(state.value, RowSnapshot):
                state.value = copy.copy(state.value)
                state.value.field_names = None
    return manifest


def overlay(text: str, jar: Manifest) -> Manifest:
    return parse_overlay(jar, "manifest_version: 1\n" + text, "overlay.yaml")


def hand_written(name: str) -> Manifest:
    return parse_manifest((MANIFESTS / f"{name}.yaml").read_text())


def test_the_overlay_completes_the_jar_into_the_hand_written_manifest() -> None:
    jar = jar_manifest("v2")
    merged = apply_overlay(jar, V2_OVERLAY)
    assert merged.to_dict() == unnamed(hand_written("v2")).to_dict()
    assert (merged.path, merged.jar, merged.origin()) == (str(V2_OVERLAY), JAR, f"{JAR} with the overlay {V2_OVERLAY}")
    assert jar.to_dict() != merged.to_dict()  # the overlay added the label's default (the comparison can fail)
    assert merged.operators["stats"].states["stats"].migration == {"fields": {"label": {"default": "migrated"}}}


def test_a_hand_written_manifest_is_an_overlay_when_it_describes_the_jar() -> None:
    for version in ("v1", "v2", "v3", "v3-with-conversion"):
        merged = apply_overlay(jar_manifest(version.split("-")[0]), MANIFESTS / f"{version}.yaml")
        assert merged.to_dict() == hand_written(version).to_dict(), version  # Row field names too: the overlay's


def test_row_field_names_are_the_overlays_to_give() -> None:
    jar = jar_manifest("v1")
    merged = overlay("operators:\n  stats:\n    states:\n      buckets:\n"
                     "        value: {row: {a: Integer, b: String, c: Double}}\n", jar)
    value = merged.operators["stats"].states["buckets"].value
    assert isinstance(value, RowSnapshot) and value.names() == ["a", "b", "c"]
    assert overlay("", jar).operators["stats"].states["buckets"].to_dict()["value"] == {
        "row": {"f0": "Integer", "f1": "String", "f2": "Double"}}


def test_a_state_the_jar_renamed_is_declared_under_its_new_name() -> None:
    merged = overlay("operators:\n  stats:\n    states:\n      recent-tx: {renamed_from: recent}\n",
                     jar_manifest("v1", rename=("recent", "recent-tx")))
    state = merged.operators["stats"].states["recent-tx"]
    assert (state.kind, state.renamed_from) == ("LIST", "recent")
    assert "recent" not in merged.operators["stats"].states


CONTRADICTIONS = {
    # the two mistakes: a type change the overlay missed, a state the jar renamed that the overlay keeps
    "a type change missed": (
        "v3", None, (MANIFESTS / "v2.yaml").read_text().split("manifest_version: 1\n", 1)[1],
        "operators.stats.states.stats.value: contradicts the jar sample-job.jar: operator stats, state stats, value, "
        "field count: the overlay says Long, the jar registers String"),
    "a state the jar renamed": (
        "v1", ("recent", "recent-tx"), (MANIFESTS / "v1.yaml").read_text().split("manifest_version: 1\n", 1)[1],
        "operators.stats.states.recent: contradicts the jar sample-job.jar: operator stats, state recent: the overlay "
        "declares it, but the jar does not register it when the operator opens (it registers: "
        "_timer_state/event_user-timers, _timer_state/processing_user-timers, buckets, count, recent-tx, stats); if "
        "the jar renamed it, declare the new name with renamed_from: recent (e.g. recent-tx)"),
    "a field the jar added": (
        "v2", None, "operators:\n  stats:\n    states:\n      stats:\n        value: {pojo: sample.Stats, fields: "
                    "{count: Long, key: String, total: Long}}\n",
        "operators.stats.states.stats.value: contradicts the jar sample-job.jar: operator stats, state stats, value, "
        "field label: the overlay does not have it, the jar registers String"),
    "a field the jar does not have": (
        "v1", None, "operators:\n  stats:\n    states:\n      stats:\n        value: {pojo: sample.Stats, fields: "
                    "{count: Long, key: String, label: String, total: Long}}\n",
        "operators.stats.states.stats.value: contradicts the jar sample-job.jar: operator stats, state stats, value, "
        "field label: the overlay has it (String), the jar does not"),
    "a Row field's type, by position": (
        "v1", None, "operators:\n  stats:\n    states:\n      buckets:\n        value: {row: {id: Long, label: String, "
                    "ratio: Double}}\n",
        "operators.stats.states.buckets.value: contradicts the jar sample-job.jar: operator stats, state buckets, "
        "value, field id: the overlay says Long, the jar registers Integer"),
    "a type as a whole": (
        "v1", None, "operators:\n  stats:\n    states:\n      recent: {value: \"Tuple2<Long, Integer>\"}\n",
        "operators.stats.states.recent.value: contradicts the jar sample-job.jar: operator stats, state recent, "
        "value: the overlay says Tuple2<Long, Integer>, the jar registers Tuple2<Long, String>"),
    "a kind": (
        "v1", None, "operators:\n  stats:\n    states:\n      recent: {kind: VALUE}\n",
        "operators.stats.states.recent.kind: contradicts the jar sample-job.jar: operator stats, state recent, kind: "
        "the overlay says VALUE, the jar registers LIST"),
    "a key": (
        "v1", None, "operators:\n  stats:\n    key: Long\n",
        "operators.stats.key: contradicts the jar sample-job.jar: operator stats, key: the overlay says Long, the "
        "jar registers String"),
    "a state dropped that the jar registers": (
        "v1", None, "operators:\n  stats:\n    dropped_states: [count]\n",
        "operators.stats.dropped_states: contradicts the jar sample-job.jar: operator stats, state count: the "
        "overlay drops it, but the jar registers it (VALUE)"),
    "an operator the jar lacks": (
        "v1", None, "operators:\n  enricher: {}\n",
        "operators.enricher: contradicts the jar sample-job.jar: operator enricher: the overlay declares it, but the "
        "jar has no operator with state of uid enricher (id 2a4ee3c2c1a2a9bd4e3c4d61d0a7c4a3) (its operators with "
        "state: sequence-source, stats)"),
}


@pytest.mark.parametrize("case", CONTRADICTIONS)
def test_a_contradiction_is_one_line_naming_operator_state_field_and_both_sides(case: str) -> None:
    version, rename, text, expected = CONTRADICTIONS[case]
    jar = jar_manifest(version, rename)
    if case == "an operator the jar lacks":
        from flinkstate.binary import operator_id_from_uid
        expected = expected.replace("2a4ee3c2c1a2a9bd4e3c4d61d0a7c4a3", operator_id_from_uid("enricher"))
    with pytest.raises(OverlayContradiction) as refused:
        overlay(text, jar)
    assert str(refused.value) == f"overlay.yaml: {expected}"
    assert "\n" not in str(refused.value)


def test_the_overlay_is_validated_by_the_manifests_parser() -> None:
    with pytest.raises(ManifestError) as refused:
        overlay("operators:\n  stats:\n    states:\n      stats:\n        migration: {fields: {label: "
                "{convert: to-strin}}}\n", jar_manifest("v2"))
    assert not isinstance(refused.value, OverlayContradiction)
    assert str(refused.value).startswith("overlay.yaml: operators.stats.states.stats.migration.fields.label.convert: "
                                         "unknown conversion 'to-strin'"), refused.value
    with pytest.raises(ManifestError) as refused:
        parse_overlay(jar_manifest("v2"), "operators: {}\n", "overlay.yaml")
    assert str(refused.value) == "overlay.yaml: manifest_version: missing (this format is version 1)"


def test_the_documented_overlay_is_the_sample_jobs() -> None:
    page = (ROOT / "docs" / "manifest.md").read_text()
    blocks = [b for b in re.findall(r"^```yaml\n(.*?)^```", page, re.MULTILINE | re.DOTALL)
              if b.startswith("# An overlay")]
    assert len(blocks) == 1
    documented = parse_overlay(jar_manifest("v2"), blocks[0], "docs/manifest.md")
    assert documented.to_dict() == apply_overlay(jar_manifest("v2"), V2_OVERLAY).to_dict()


def test_a_resolved_schema_written_with_its_sources_reads_back_as_the_jars(tmp_path: Path) -> None:
    # What the upgrade DAG's preflight_checks writes into the run's folder, for the Spark jobs: the merged manifest
    # with the jar and overlay it was made of, so that read back it judges as the jar's (Manifest.jar: a savepoint
    # state it lacks is STATE_NOT_REGISTERED, not merely undeclared) and its origin names both.
    merged = apply_overlay(jar_manifest("v2"), V2_OVERLAY)
    text = merged.dump(sources=True)
    assert text.startswith(f"manifest_version: 1\njob: keyed-stats\njar: {JAR}\noverlay: {V2_OVERLAY}\n"), text
    again = parse_manifest(text, "run/new-schema.yaml")
    assert (again.jar, again.overlay, again.origin()) == (JAR, str(V2_OVERLAY), f"{JAR} with the overlay {V2_OVERLAY}")
    assert again.to_dict() == merged.to_dict() and "jar" not in merged.dump()  # only when asked for
    written = tmp_path / "new-schema.yaml"
    written.write_text(jar_manifest("v2").dump(sources=True))
    jar_alone = load_manifest(written)  # its path is the file's: the jar alone is still the origin
    assert (jar_alone.path, jar_alone.jar, jar_alone.overlay, jar_alone.origin()) == (str(written), JAR, None, JAR)
    # without the keys it is a plain manifest again (the comparison can fail)
    assert parse_manifest(merged.dump(), "m.yaml").jar is None


@pytest.mark.parametrize(("text", "message"), [
    ("manifest_version: 1\noverlay: o.yaml\n", "m.yaml: overlay: an overlay completes a jar's schema: give the jar "
                                               "too (jar: ...)"),
    ("manifest_version: 1\njar: [a.jar]\n", "m.yaml: jar: expected a non-empty string, got "),
])
def test_the_sources_keys_are_validated(text: str, message: str) -> None:
    with pytest.raises(ManifestError) as info:
        parse_manifest(text, "m.yaml")
    assert str(info.value).startswith(message), str(info.value)


def test_a_jars_unnamed_rows_stay_positional_after_the_round_trip() -> None:
    # A jar's Row types have no field names (snapshots store none); written into a file they read f0, f1, ... The
    # running version's manifest names them (id, label, ratio). Matched by name, no field would be found and the
    # migration would write every bucket's fields as null (seen in the upgrade DAG before this); default names
    # against real ones are no names at all: fields are matched by position, as Flink does and as the jar's
    # in-memory schema (field_names None) is.
    from flinkstate.migration.manifest_targets import row_names

    old = hand_written("v1").operators["stats"].states["buckets"].value
    in_memory = jar_manifest("v2").operators["stats"].states["buckets"].value
    resolved = parse_manifest(jar_manifest("v2").dump(sources=True), "run/new-schema.yaml")
    from_file = resolved.operators["stats"].states["buckets"].value
    assert isinstance(from_file, RowSnapshot) and from_file.field_names == ["f0", "f1", "f2"]
    assert row_names(old, in_memory) == row_names(old, from_file) == {}
    assert from_file.resolve_compatibility(old, "value").findings == []  # no "renamed id -> f0, ..." either
    # default names on both sides (two `schema` outputs) and real names on both are matched by name, as before
    assert row_names(from_file, from_file) == {"": (["f0", "f1", "f2"], ["f0", "f1", "f2"])}
    named = hand_written("v2").operators["stats"].states["buckets"].value
    assert row_names(old, named) == {"": (["id", "label", "ratio"], ["id", "label", "ratio"])}

"""``flinkstate migrate SAVEPOINT --schema MANIFEST --output DIR``: rewrites a savepoint so that the version the
manifest describes restores it as-is. The source is only read; the output appears only once verified."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from flinkstate.manifest import load_manifest
from flinkstate.migration.engine import MigrationReport, migrate_savepoint
from flinkstate.migration.manifest_targets import check_against_manifest, targets_from_manifest
from flinkstate.savepoint import Savepoint
from flinkstate.writer import open_output


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "migrate", help="rewrite a savepoint for a new job version",
        description="Rewrite SAVEPOINT into a new, self-contained savepoint directory that the job version "
                    "described by MANIFEST restores as-is, applying each state's migration: block. The output is "
                    "written to a staging directory, re-read and checked, and only then renamed to OUTPUT.")
    parser.add_argument("savepoint", metavar="SAVEPOINT", help="savepoint directory or its _metadata file")
    parser.add_argument("--schema", required=True, metavar="MANIFEST", help="the new version's state manifest")
    parser.add_argument("--old-schema", metavar="MANIFEST",
                        help="the old version's manifest (names Row fields, which savepoints do not store)")
    parser.add_argument("--output", required=True, metavar="DIR", help="the new savepoint directory (must not exist)")
    parser.add_argument("--metadata-version", type=int, choices=(3, 4, 5, 6),
                        help="_metadata version to write (default: the source's)")
    parser.add_argument("--compression", choices=("on", "off"),
                        help="snappy-compress rewritten keyed state (default: as the source)")
    parser.add_argument("--report", metavar="DIR",
                        help="write report.json and dead-letters.jsonl there (default: OUTPUT.report beside OUTPUT)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    parser.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    manifest = load_manifest(args.schema)
    old_manifest = load_manifest(args.old_schema) if args.old_schema else None
    targets = targets_from_manifest(Savepoint.open(args.savepoint), manifest, old_manifest)
    output = open_output(args.output)
    compressed = None if args.compression is None else args.compression == "on"
    report = migrate_savepoint(args.savepoint, targets, output, metadata_version=args.metadata_version,
                               compressed=compressed,
                               extra_check=lambda staged: check_against_manifest(staged, manifest))
    report_dir = Path(args.report) if args.report else Path(f"{str(args.output).rstrip('/')}.report")
    write_report(report, report_dir)
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_text(report, report_dir))
    return 0


def write_report(report: MigrationReport, directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "report.json").write_text(json.dumps(report.to_json(), indent=2) + "\n")
    with open(directory / "dead-letters.jsonl", "w") as sink:
        for record in report.dead_letters:
            sink.write(json.dumps(record) + "\n")


def render_text(report: MigrationReport, report_dir: Path) -> str:
    lines = [f"migrated {report.source}", f"  -> {report.output} (_metadata version {report.metadata_version})"]
    for operator, states in report.counts.items():
        for name, count in states.items():
            dead = f", {count.dead_lettered} dead-lettered" if count.dead_lettered else ""
            lines.append(f"  {operator}/{name}: {count.read} read, {count.written} written{dead}")
    lines += [f"  verified: {line}" for line in report.verification]
    lines.append(f"  report: {report_dir}/report.json ({len(report.dead_letters)} dead letters in "
                 f"dead-letters.jsonl)")
    return "\n".join(lines)

"""The docs cannot rot: every YAML example of the manifest reference loads with the real manifest loader,
and what it declares is what the page says; no document links outside the repository; every README section and
docs page the CLI's help points to exists."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from flinkstate.manifest import Manifest, parse_manifest

DOCS = Path(__file__).resolve().parent.parent / "docs"
MANIFEST_PAGE = DOCS / "manifest.md"
_YAML_BLOCK = re.compile(r"^```yaml\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _examples() -> list[str]:
    """The page's manifests (its overlays, which leave types to a jar: tests/test_manifest_overlay.py)."""
    return [b for b in _YAML_BLOCK.findall(MANIFEST_PAGE.read_text()) if not b.startswith("# An overlay")]


def _load(index: int) -> Manifest:
    return parse_manifest(_examples()[index], f"docs/manifest.md example {index + 1}")


def test_the_reference_has_its_examples() -> None:
    assert len(_examples()) == 4


@pytest.mark.parametrize("index", range(4))
def test_every_example_loads_and_round_trips(index: int) -> None:
    manifest = _load(index)
    # what the loader understood, written back and loaded again, is the same manifest
    again = parse_manifest(manifest.dump(), "round trip")
    assert again.to_dict() == manifest.to_dict()


def test_the_complete_example_is_the_sample_jobs_v2() -> None:
    documented = _load(0).to_dict()
    shipped = parse_manifest((DOCS.parent / "examples" / "sample-job" / "manifests" / "v2.yaml").read_text())
    assert documented == shipped.to_dict()


def test_operators_by_id_and_structured_types_are_what_the_page_says() -> None:
    by_id = _load(1)
    assert by_id.operators["legacy-aggregator"].operator_id == "0a448493b4782967b150582570326227"
    assert by_id.operators["legacy-aggregator"].uid is None
    assert by_id.operators["8c4ae6d3cba4b3a2c3e4e8e0d0b1f2a7"].operator_id == "8c4ae6d3cba4b3a2c3e4e8e0d0b1f2a7"
    states = _load(2).operators["enricher"].states
    assert {name: state.kind for name, state in states.items()} == {
        "profile": "VALUE", "seen": "MAP", "status": "VALUE", "last": "VALUE", "windows": "REDUCING",
        "event": "VALUE", "blob": "VALUE"}
    assert states["seen"].value is not None and states["seen"].value.type_name() == "Tuple2<Long, Row(INT, STRING)>"
    assert states["windows"].namespace.type_name() == "TimeWindow"


def test_the_migration_example_declares_what_it_says() -> None:
    from flinkstate.migration.spec import parse_migration

    stats = _load(3).operators["stats"]
    assert stats.dropped_states == ["recent"]
    assert stats.states["count"].renamed_from == "counter"
    rules = parse_migration(dict(stats.states["stats"].migration or {}))
    assert (rules.fields["count"].convert, rules.fields["label"].default, rules.fields["title"].source,
            rules.on_error) == ("to-string", "n/a", "name", "dead-letter")
    buckets = parse_migration(dict(stats.states["buckets"].migration or {}))
    assert (buckets.user_key, buckets.function) == ("to-string", "mypkg.fixes:upgrade_bucket")


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_links_stay_inside_the_repository(page: Path) -> None:
    for target in re.findall(r"\]\(([^)]+)\)", page.read_text()):
        if target.startswith(("http://", "https://", "#")):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.is_relative_to(DOCS.parent) and path.exists(), f"{page.name} links to {target}"


def _github_anchor(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation but ``-`` and ``_`` dropped, spaces as
    ``-``."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _help_texts() -> dict[str, str]:
    """``flinkstate --help`` and the help of every command and sub-command, by command line."""
    import argparse

    from flinkstate.cli import build_parser

    texts, pending = {}, [("flinkstate", build_parser())]
    while pending:
        name, parser = pending.pop()
        texts[name] = parser.format_help()
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                pending += [(f"{name} {sub}", child) for sub, child in action.choices.items()]
    return texts


def test_every_readme_section_the_cli_help_points_to_exists() -> None:
    readme = (DOCS.parent / "README.md").read_text()
    anchors = {_github_anchor(line.lstrip("#")) for line in readme.splitlines() if re.match(r"#{1,6} ", line)}
    assert "checking-compatibility-schema-and-check" in anchors  # the slug rule, on a heading with code in it
    pointers = 0
    for command, text in _help_texts().items():
        flat = " ".join(text.split())
        for mention in re.finditer(r"README(\S*)", flat):
            target = mention.group(1).rstrip(".,;:)")
            assert target.startswith(".md#"), f"`{command} --help` names the README without a section: " \
                                              f"...{flat[max(mention.start() - 60, 0):mention.end() + 40]}..."
            assert target.removeprefix(".md#") in anchors, f"`{command} --help` points to a README section that " \
                                                           f"does not exist: README{target}"
            pointers += 1
        for page in re.findall(r"\bdocs/[\w.-]+\.md\b", flat):
            assert (DOCS.parent / page).is_file(), f"`{command} --help` points to {page}, which does not exist"
    assert pointers >= 1


def test_the_readme_says_what_v2s_label_restores_as() -> None:
    """The sample job's v2 adds `label`: Flink alone restores it as null, the upgrade (migrate with the manifest's
    declared default, what `make demo` shows) as that default. The README's v2 line says both."""
    from flinkstate.migration.spec import parse_migration

    v2 = parse_manifest((DOCS.parent / "examples" / "sample-job" / "manifests" / "v2.yaml").read_text())
    default = parse_migration(dict(v2.operators["stats"].states["stats"].migration or {})).fields["label"].default
    readme = (DOCS.parent / "README.md").read_text()
    line = " ".join(readme.split("\n- **v2**:", 1)[1].split("\n- **v3**:", 1)[0].split())
    assert "restores it as null" in line and f'restores as `"{default}"`' in line, line

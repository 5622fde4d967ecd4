"""Where the Flink distributions of this machine are, by version: to run a jar (the jar inspector) on the classes of
the Flink it will run on, which may not be the default one (an upgrade across clusters: the old jar on 1.20's
classes, the new one on 2.3's)."""

from __future__ import annotations

import glob
import os
from pathlib import Path

from flinkstate.engine.local import find_flink_home, flink_version
from flinkstate.errors import EnvironmentProblem

#: The checkout (or editable install) this module is in: ``make setup`` puts older Flinks into its .flink-dists/.
_PROJECT_ROOT = Path(__file__).resolve().parents[2]

#: Further Flink distributions (their pyflink/ or FLINK_HOME folders), separated by the path separator, among which
#: :func:`flink_home_for_version` looks for a version; ``make setup`` puts older ones into ``.flink-dists/``.
FLINK_HOMES_ENV = "FLINKSTATE_FLINK_HOMES"


def flink_home_for_version(version: str) -> Path:
    """A local Flink distribution of ``version`` (a cluster's ``flink-version``), to run a jar on the classes of the
    Flink it will run on: the default distribution (:func:`find_flink_home`), the folders in $FLINKSTATE_FLINK_HOMES,
    or ``.flink-dists/*/pyflink`` beside this checkout. The same version is taken first, else the same minor (its
    serializers are the same). Raises one line when none is found."""
    candidates: list[Path] = []
    try:
        candidates.append(find_flink_home())
    except EnvironmentProblem:
        pass  # only the other places, then
    candidates += [Path(p) for p in os.environ.get(FLINK_HOMES_ENV, "").split(os.pathsep) if p]
    candidates += [Path(p) for p in sorted(glob.glob(str(_PROJECT_ROOT / ".flink-dists" / "*" / "pyflink")))]
    versions: dict[Path, str] = {}
    for home in candidates:
        try:
            versions[home.resolve()] = flink_version(home)
        except EnvironmentProblem:
            continue  # not a distribution: another may be
    minor = ".".join(version.split(".")[:2])
    for wanted in (lambda v: v == version, lambda v: ".".join(v.split(".")[:2]) == minor):
        found = next((home for home, v in versions.items() if wanted(v)), None)
        if found is not None:
            return found
    have = ", ".join(f"{v} ({h})" for h, v in versions.items()) or "none"
    raise EnvironmentProblem(f"no local Flink {version} distribution to inspect a jar with (found: {have}; add one "
                             f"to ${FLINK_HOMES_ENV})")


__all__ = ["FLINK_HOMES_ENV", "flink_home_for_version"]

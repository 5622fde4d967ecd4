"""The release file of scheduled upgrades: which version each deployment should run, and when it may be upgraded
(read by the ``flink_scheduled_upgrades`` DAG, ``plugins/flinkstate_airflow/releases.py``, which decides what is due,
and by ``flinkstate upgrade run --release``, which triggers one entry), and the ``flink_state_upgrade`` conf of one
entry. No Airflow here: the file is read through the bounded YAML loader (size, depth, no aliases)::

    jobs:
      keyed-stats:                        # the deployment's name = its key in the deployment registry
        flink_job_name: keyed-stats-v1    # optional (default: the key); only used when the registry has no job id
        jar: /path/new.jar                # or s3://... as the Flink REST upload accepts a local path only: local
        entry_class: sample.KeyedStatsJob
        program_args: [--keys, "10"]
        parallelism: 2
        manifest: /path/v2-overlay.yaml   # optional: the version's schema is its jar's; a manifest is an overlay of it
        window: {start: "02:00", end: "04:00", timezone: UTC, days: [mon, tue]}   # optional: always open
        current: {jar: ..., program_args: [...]}   # optional: the running version, when the registry has no record
        allow_non_restored_state: false      # optional, passed on to flink_state_upgrade, as are
        min_checkpoints: 2                   # min_checkpoints, max_restarts, gate_timeout, max_dead_letters and mode
        approval: true                       # optional: a person approves the stop (the Airflow UI) ...
        approval_timeout: 3600               # ... within this many seconds, else the run aborts (the job runs on)
        target_flink_conn_id: flink_2x       # optional: the new version runs on this Flink connection's cluster
    savepoint_base: /path/or/s3://bucket/prefix
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from datetime import datetime, time, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from flinkstate.bounded_yaml import YAMLRefused, load_yaml
from flinkstate.engine.rest import FlinkRestClient, FlinkRestError
from flinkstate.errors import FlinkStateError
from flinkstate.storage.uri import read_file
from flinkstate.upgrades.journal import JobVersion, UpgradeError

DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
#: Per-job settings passed through to flink_state_upgrade's params, with their types.
PASS_THROUGH: dict[str, type] = {"allow_non_restored_state": bool, "min_checkpoints": int, "max_restarts": int,
                                 "gate_timeout": int, "max_dead_letters": int, "approval": bool,
                                 "approval_timeout": int, "target_flink_conn_id": str}
JOB_KEYS = {"flink_job_name", "jar", "entry_class", "program_args", "parallelism", "manifest", "window", "current",
            "mode", *PASS_THROUGH}
_HHMM = re.compile(r"^([01]\d|2[0-3]):([0-5]\d)$")


class ReleaseError(FlinkStateError):
    """The release file is unusable; the message names the file and the path inside it, in one line."""


@dataclass(frozen=True)
class Window:
    """Daily upgrade window [start, end) in ``timezone``; ``end < start`` runs over midnight, and ``days`` are the
    days on which a window *starts* (Friday 22:00-02:00 is open until Saturday 02:00)."""

    start: time
    end: time
    timezone: str = "UTC"
    days: tuple[str, ...] = DAYS

    def is_open(self, now: datetime) -> bool:
        if now.tzinfo is None:
            raise ValueError("now must be timezone-aware")
        local = now.astimezone(ZoneInfo(self.timezone))
        clock = local.time().replace(tzinfo=None)
        if self.start < self.end:
            return self.start <= clock < self.end and DAYS[local.weekday()] in self.days
        if clock >= self.start:  # the evening part: the window started today
            return DAYS[local.weekday()] in self.days
        if clock < self.end:  # the morning part: the window started yesterday
            return DAYS[(local - timedelta(days=1)).weekday()] in self.days
        return False

    def describe(self) -> str:
        days = "" if self.days == DAYS else f" on {','.join(self.days)}"
        return f"{self.start:%H:%M}-{self.end:%H:%M} {self.timezone}{days}"


@dataclass(frozen=True)
class ReleaseJob:
    """One deployment in the release file."""

    name: str
    flink_job_name: str
    version: JobVersion
    window: Window | None = None
    current: JobVersion | None = None
    mode: str = "upgrade"
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Release:
    source: str
    savepoint_base: str
    jobs: dict[str, ReleaseJob]


# ---------------------------------------------------------------------------------------------------------- parsing

def load_release(uri: str) -> Release:
    """Reads and validates a release file (local path or s3://)."""
    try:
        text = read_file(uri).decode()
    except (OSError, FlinkStateError) as exc:
        raise ReleaseError(f"{uri}: cannot read the release file: {exc}") from None
    return parse_release(text, uri)


def parse_release(text: str, source: str) -> Release:
    try:
        data = load_yaml(text, source)  # bounded: size, no aliases (an alias bomb would hang the tick), depth
    except YAMLRefused as exc:
        where = f" (line {exc.line})" if exc.line is not None else ""
        raise ReleaseError(f"{source}: not YAML{where}: {exc.problem.removeprefix('invalid YAML: ')}") from None
    if not isinstance(data, dict):
        raise ReleaseError(f"{source}: expected a mapping with 'jobs' and 'savepoint_base'")
    unknown = set(data) - {"jobs", "savepoint_base"}
    if unknown:
        raise ReleaseError(f"{source}: unknown key {sorted(unknown)[0]!r} (expected jobs, savepoint_base)")
    base = data.get("savepoint_base")
    if not isinstance(base, str) or not base.strip():
        raise ReleaseError(f"{source}: savepoint_base: required, a local folder or s3://bucket/prefix")
    jobs = data.get("jobs")
    if not isinstance(jobs, dict) or not jobs:
        raise ReleaseError(f"{source}: jobs: required, a mapping of deployment name -> version")
    parsed = {str(name): _parse_job(str(name), spec, f"{source}: jobs.{name}") for name, spec in jobs.items()}
    return Release(source, base.rstrip("/"), parsed)


def _parse_job(name: str, spec: Any, where: str) -> ReleaseJob:
    if not isinstance(spec, dict):
        raise ReleaseError(f"{where}: expected a mapping (jar, entry_class, program_args, ...)")
    unknown = set(spec) - JOB_KEYS
    if unknown:
        raise ReleaseError(f"{where}.{sorted(unknown)[0]}: unknown key (expected one of {', '.join(sorted(JOB_KEYS))})")
    version = _parse_version(spec, where)
    current = None
    if spec.get("current") is not None:
        if not isinstance(spec["current"], dict):
            raise ReleaseError(f"{where}.current: expected a mapping (jar, entry_class, program_args, ...)")
        current = _parse_version(spec["current"], f"{where}.current")
    flink_job_name = spec.get("flink_job_name", name)
    if not isinstance(flink_job_name, str) or not flink_job_name:
        raise ReleaseError(f"{where}.flink_job_name: expected a job name")
    mode = spec.get("mode", "upgrade")
    if mode not in ("upgrade", "check-only"):
        raise ReleaseError(f"{where}.mode: expected upgrade or check-only, got {mode!r}")
    options = {}
    for key, kind in PASS_THROUGH.items():
        if key in spec:
            value = spec[key]
            # bool is an int in Python: a YAML 'true' must not pass as a count, nor 1 as a flag.
            if type(value) is not kind or (isinstance(value, int) and value < 0):
                raise ReleaseError(f"{where}.{key}: expected a{' non-negative' if kind is int else ''} "
                                   f"{kind.__name__}, got {value!r}")
            options[key] = value
    window = parse_window(spec["window"], f"{where}.window") if spec.get("window") is not None else None
    return ReleaseJob(name, flink_job_name, version, window, current, mode, options)


def _parse_version(spec: dict[str, Any], where: str) -> JobVersion:
    if not isinstance(spec.get("jar"), str) or not spec["jar"]:
        raise ReleaseError(f"{where}.jar: required, a path")
    if spec.get("manifest") is not None and (not isinstance(spec["manifest"], str) or not spec["manifest"]):
        raise ReleaseError(f"{where}.manifest: expected a path (optional: the version's schema is its jar's, and a "
                           f"manifest an overlay of it), got {spec['manifest']!r}")
    if spec.get("entry_class") is not None and not isinstance(spec["entry_class"], str):
        raise ReleaseError(f"{where}.entry_class: expected a class name, got {spec['entry_class']!r}")
    args = spec.get("program_args", [])
    if not isinstance(args, list) or not all(isinstance(a, str | int | float) and not isinstance(a, bool)
                                             for a in args):
        raise ReleaseError(f"{where}.program_args: expected a list of strings, got {args!r}")
    parallelism = spec.get("parallelism")
    if parallelism is not None and (type(parallelism) is not int or parallelism < 1):
        raise ReleaseError(f"{where}.parallelism: expected a positive integer, got {parallelism!r}")
    try:
        return JobVersion.from_dict({k: spec.get(k) for k in ("jar", "manifest", "entry_class", "program_args",
                                                               "parallelism")}, where)
    except UpgradeError as exc:
        raise ReleaseError(str(exc)) from None


def parse_window(spec: Any, where: str) -> Window:
    if not isinstance(spec, dict):
        raise ReleaseError(f"{where}: expected {{start: 'HH:MM', end: 'HH:MM', timezone: ..., days: [...]}}")
    unknown = set(spec) - {"start", "end", "timezone", "days"}
    if unknown:
        raise ReleaseError(f"{where}.{sorted(unknown)[0]}: unknown key (expected start, end, timezone, days)")
    bounds = []
    for key in ("start", "end"):
        value = spec.get(key)
        # YAML 1.1 reads an unquoted 02:00 as the sexagesimal integer 120: ask for quotes rather than guess.
        match = _HHMM.match(value) if isinstance(value, str) else None
        if not match:
            hint = " (quote it: \"02:00\")" if isinstance(value, int) else ""
            raise ReleaseError(f"{where}.{key}: expected \"HH:MM\" (00:00-23:59), got {value!r}{hint}")
        bounds.append(time(int(match[1]), int(match[2])))
    if bounds[0] == bounds[1]:
        raise ReleaseError(f"{where}: start equals end ({spec['start']}); omit the window to allow any time")
    timezone = spec.get("timezone", "UTC")
    try:
        ZoneInfo(str(timezone))
    except (ZoneInfoNotFoundError, ValueError):
        raise ReleaseError(f"{where}.timezone: unknown time zone {timezone!r}") from None
    days: tuple[str, ...] = DAYS
    if "days" in spec:
        raw = spec["days"]
        if not isinstance(raw, list) or not raw:
            raise ReleaseError(f"{where}.days: expected a non-empty list of mon, tue, ..., sun")
        names = [str(d).lower()[:3] for d in raw]
        bad = [str(d) for d, n in zip(raw, names, strict=True) if n not in DAYS]
        if bad:
            raise ReleaseError(f"{where}.days: unknown day {bad[0]!r} (expected mon, tue, ..., sun)")
        days = tuple(d for d in DAYS if d in names)
    return Window(bounds[0], bounds[1], str(timezone), days)


# ---------------------------------------------------------------------------------------------------------- the conf

def running_job_id(client: FlinkRestClient, recorded: str | None, flink_job_name: str) -> str:
    """The Flink job to upgrade: the registry's job id while that job is RUNNING (an upgrade renames the job, v1 ->
    v2, so the id is the reliable handle), else the one RUNNING job named ``flink_job_name``."""
    if recorded:
        try:
            if client.job_state(recorded) == "RUNNING":
                return recorded
        except FlinkRestError:
            pass  # unknown to this cluster (e.g. its history expired): fall back to the name
    return client.find_job(flink_job_name)


def upgrade_conf(release: Release, job: ReleaseJob, job_id: str, current: JobVersion | None) -> dict[str, Any]:
    """flink_state_upgrade's conf: the registry key as job_name (so the registry entry is the one updated) and the
    resolved job id (which wins over the name there)."""
    new = job.version
    conf: dict[str, Any] = {
        "job_name": job.name, "job_id": job_id, "jar": new.jar, "entry_class": new.entry_class or "",
        "program_args": list(new.program_args), "parallelism": new.parallelism, "manifest": new.manifest or "",
        "savepoint_base": release.savepoint_base, "mode": job.mode, **job.options}
    if current is not None:
        conf["current"] = asdict(current)
    return conf

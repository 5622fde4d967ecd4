"""The state schema of a job jar, as Flink will see it: ``flinkstate schema --jar``.

The jar inspector (``inspector/`` in the checkout: Java, built against the Flink distribution by its ``build.sh``)
runs the job's ``main()`` the way ``flink run`` builds a job without executing it, turns the captured StreamGraph into
the JobGraph Flink would submit (operator ids: hashed uids and generated hashes alike), opens every operator in
isolation with empty state on a HashMap keyed backend, and writes the bytes of a canonical savepoint snapshot of each:
the keyed backend's ``KeyedBackendSerializationProxy`` (key serializer snapshot, one meta info per state) and the
operator backend's proxy. This module runs it (one JVM, a time limit, a heap limit), reads those bytes with the
savepoint readers (:mod:`flinkstate.format.keyed_header`, :mod:`flinkstate.format.operator_state`) and builds the
:class:`~flinkstate.manifest.Manifest` that ``flinkstate schema`` writes of a savepoint of the same jar.

This runs the job's own ``main()`` and its operators' ``initializeState()``/``open()`` code (the code that runs in
production anyway), in a separate process. A source is only initialized (its ``open()`` starts reading); nothing is
submitted, no record flows, no timer fires.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from flinkstate.binary import Reader
from flinkstate.engine.local import find_flink_home, flink_version, require_java
from flinkstate.errors import EnvironmentProblem, FlinkStateError, printable
from flinkstate.format.keyed_header import KeyedBackendHeader, read_stream_header
from flinkstate.format.operator_state import OperatorBackendHeader, read_operator_header
from flinkstate.format_errors import SavepointFormatError
from flinkstate.major_upgrade import flink_version_problem
from flinkstate.manifest import Manifest, OperatorSchema, add_keyed_states
from flinkstate.manifest_operator_states import operator_states_of
from flinkstate.serializers.kryo_layout import KryoLayouts, layouts_from_json

#: The checkout this module runs from (an editable install), which holds the inspector's sources.
_PROJECT_ROOT = Path(__file__).resolve().parents[2]
INSPECTOR_DIR = _PROJECT_ROOT / "inspector"
INSPECTOR_MAIN = "flinkstate.inspector.SchemaInspector"
#: What the inspector writes first (SchemaInspector.MAGIC, FORMAT_VERSION).
OUTPUT_MAGIC = "flinkstate-jar-schema"
OUTPUT_VERSION = 3
#: The prefix of the inspector's one error line on stderr, and its exit statuses.
ERROR_PREFIX = "flinkstate-inspector: "
EXIT_MAIN_FAILED = 2
EXIT_OPERATOR_FAILED = 3

DEFAULT_TIMEOUT_SECONDS = 120.0
DEFAULT_MAX_HEAP = "512m"


@dataclass(frozen=True)
class InspectedOperator:
    """One operator of the job as the inspector opened it: the state it registered (the headers of its keyed and
    operator state streams; None when it wrote none)."""

    operator_id: str
    uid: str | None
    name: str
    operator_class: str
    opened: bool  # False for a source: only initialized
    window: str | None  # the window it assigns records to (flinkstate.windows), None: none
    keyed: KeyedBackendHeader | None
    operator: OperatorBackendHeader | None

    @property
    def label(self) -> str:
        return self.uid or self.operator_id


@dataclass(frozen=True)
class JarSchema:
    """What a jar's operators register, read from one inspector run (or its cached output)."""

    jar: str
    flink_version: str
    job_name: str
    operators: list[InspectedOperator]
    seconds: float  # the inspector run's wall time (0 when read from the cache)
    cached: bool
    #: The jar's own classes as its Flink's Kryo serializes them (the inspector asks Kryo: issue 27).
    kryo_classes: KryoLayouts = field(default_factory=dict)

    def manifest(self, job: str | None = None) -> Manifest:
        """The manifest ``flinkstate schema`` writes of a savepoint this jar takes: every operator that registers
        state, with its key type, keyed states and operator states (none: an empty mapping, which is what the jar
        says)."""
        operators: dict[str, OperatorSchema] = {}
        for inspected in self.operators:
            if inspected.keyed is None and inspected.operator is None:
                continue
            schema = OperatorSchema(inspected.label, inspected.operator_id, inspected.uid, window=inspected.window)
            if inspected.keyed is not None:
                add_keyed_states(schema, inspected.keyed)
            schema.operator_states = operator_states_of(inspected.operator) if inspected.operator is not None else {}
            operators[inspected.label] = schema
        # The jar's Flink is the version the schema describes (a 1.x savepoint restored by it may cross majors).
        flink = self.flink_version if flink_version_problem(self.flink_version) is None else None
        return Manifest(operators, job or self.job_name or None, self.jar, jar=self.jar, flink_version=flink,
                        kryo_classes=self.kryo_classes or None)


@dataclass(frozen=True)
class UnregisteredState:
    """A keyed state the savepoint holds on an operator the jar has, which the jar does not register when that
    operator initializes and opens: registered lazily on first use, or removed."""

    operator: str
    state: str
    kind: str

    def line(self) -> str:
        return f"operator {printable(self.operator)}, state {printable(self.state)} ({self.kind}): {self.reason()}"

    def reason(self) -> str:
        """What it is and the way out (also ``check``'s finding on such a state, which names operator and state)."""
        return ("the savepoint holds it but the jar does not register it when the operator opens (registered lazily "
                "on first use, or removed): register it in open(), or declare it in the manifest (renamed_from, or "
                "dropped_states)")


def unregistered_states(savepoint: Manifest, jar: Manifest) -> list[UnregisteredState]:
    """The keyed states of ``savepoint``'s manifest that ``jar``'s does not register, on the operators both have
    (matched by operator id). An operator the jar does not have at all is a different finding (a removed operator,
    or a changed uid), not listed here."""
    found: list[UnregisteredState] = []
    for operator in savepoint.operators.values():
        registered = jar.find(operator.operator_id)
        if registered is None:
            continue
        for name, state in operator.states.items():
            if name not in registered.states:
                found.append(UnregisteredState(operator.label, name, state.kind))
    return found


# -- running the inspector -------------------------------------------------------------------------------------------


def inspector_jar(flink_home: Path) -> Path:
    """The inspector built against ``flink_home`` (built now if it is missing or older than its sources: one javac,
    seconds)."""
    build = INSPECTOR_DIR / "build.sh"
    if not build.exists():
        raise EnvironmentProblem(f"the jar inspector's sources are not here ({INSPECTOR_DIR}): 'schema --jar' runs "
                                 f"from a flinkstate checkout")
    jar = INSPECTOR_DIR / "build" / f"flink-{flink_version(flink_home)}" / "flinkstate-inspector.jar"
    result = subprocess.run(["bash", str(build), str(flink_home), str(jar)], capture_output=True, text=True,
                            check=False)
    if result.returncode != 0 or not jar.exists():
        last = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise EnvironmentProblem(f"building the jar inspector against {flink_home} failed: {printable(last)}")
    return jar


def _java_options(flink_home: Path) -> list[str]:
    """The distribution's ``env.java.opts.all`` (the ``--add-opens`` Java 17 needs for Flink's serializers), as a
    TaskManager gets them."""
    config = flink_home / "conf" / "config.yaml"
    if not config.exists():
        return []
    data: Any = yaml.safe_load(config.read_text(encoding="utf-8")) or {}
    value: Any = data.get("env.java.opts.all") if isinstance(data, dict) else None
    for part in ("env", "java", "opts", "all"):
        if value is not None or not isinstance(data, dict):
            break
        data = data.get(part)
        value = data if part == "all" else None
    return str(value).split() if isinstance(value, str) else []


def default_cache_dir() -> Path:
    """``$FLINKSTATE_CACHE_DIR``, else ``$XDG_CACHE_HOME/flinkstate``, else ``~/.cache/flinkstate``; jar schemas
    are kept in its ``jar-schema/`` folder."""
    if os.environ.get("FLINKSTATE_CACHE_DIR"):
        return Path(os.environ["FLINKSTATE_CACHE_DIR"]) / "jar-schema"
    base = Path(os.environ["XDG_CACHE_HOME"]) if os.environ.get("XDG_CACHE_HOME") else Path.home() / ".cache"
    return base / "flinkstate" / "jar-schema"


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _cache_key(jar: Path, inspector: Path, version: str, entry_class: str | None, parallelism: int,
               program_args: Sequence[str]) -> str:
    """The jar's bytes, the inspector's, the Flink version and how main() is called: what the output depends on
    (besides what main() reads from elsewhere: --no-cache then)."""
    digest = hashlib.sha256()
    for part in (_file_hash(jar), _file_hash(inspector), version, entry_class or "", str(parallelism),
                 *program_args):
        digest.update(part.encode("utf-8") + b"\0")
    return digest.hexdigest()


def inspect_jar(jar: str | os.PathLike[str], *, entry_class: str | None = None, program_args: Sequence[str] = (),
                flink_home: str | os.PathLike[str] | None = None, parallelism: int = 1,
                timeout: float = DEFAULT_TIMEOUT_SECONDS, max_heap: str = DEFAULT_MAX_HEAP,
                cache_dir: str | os.PathLike[str] | None = None, use_cache: bool = True) -> JarSchema:
    """Runs the inspector on ``jar`` (its ``main()`` with ``program_args``; ``parallelism``: the default parallelism
    ``flink run`` would give, which shapes the generated ids of uid-less operators) in a JVM limited to ``timeout``
    seconds and ``max_heap``, or reads its output from the cache (by the jar's hash, the arguments and the Flink
    version; ``use_cache`` False: not read, but rewritten). A main() or an operator that fails, or a run that
    outlasts the limit, raises one line."""
    jar_path = Path(jar)
    if not jar_path.is_file():
        raise FlinkStateError(f"{jar}: no such jar file")
    home = find_flink_home(flink_home)
    version = flink_version(home)
    inspector = inspector_jar(home)
    cache = Path(cache_dir) / "jar-schema" if cache_dir is not None else default_cache_dir()
    cached_file = cache / f"{_cache_key(jar_path, inspector, version, entry_class, parallelism, program_args)}.bin"
    if use_cache and cached_file.is_file():
        return parse_inspection(cached_file.read_bytes(), str(jar), str(cached_file), 0.0, cached=True)

    data, seconds = _run_inspector(home, inspector, jar_path, entry_class=entry_class, program_args=program_args,
                                   parallelism=parallelism, timeout=timeout, max_heap=max_heap)
    try:  # written even when not read (use_cache False): the fresh schema replaces what the cache held
        cache.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=cache, delete=False, suffix=".tmp") as handle:
            handle.write(data)
        os.replace(handle.name, cached_file)
    except OSError:
        pass  # a cache that cannot be written only costs the next run its JVM
    return parse_inspection(data, str(jar), f"{jar} (inspector output)", seconds, cached=False)


def _run_inspector(home: Path, inspector: Path, jar_path: Path, *, entry_class: str | None,
                   program_args: Sequence[str], parallelism: int, timeout: float, max_heap: str,
                   options: Sequence[str] = ()) -> tuple[bytes, float]:
    """One inspector JVM (``options``: its mode's, e.g. ``--trial``): its output file's bytes and its wall time. A
    main() or an operator that fails, or a run that outlasts the limit, raises one line."""
    java, _ = require_java()
    jar = str(jar_path)
    with tempfile.TemporaryDirectory(prefix="flinkstate-jar-schema-") as work:
        out = Path(work) / "schema.bin"
        command = [java, f"-Xmx{max_heap}", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
                   "-Dorg.apache.logging.log4j.level=OFF", "-Dlog4j2.level=OFF", f"-Djava.io.tmpdir={work}",
                   *_java_options(home), "-cp", os.pathsep.join([str(inspector), str(home / "lib" / "*")]),
                   INSPECTOR_MAIN, "--jar", str(jar_path.resolve()), "--out", str(out),
                   "--parallelism", str(parallelism), *options]
        if entry_class:
            command += ["--entry-class", entry_class]
        command += ["--", *program_args]
        started = time.monotonic()
        try:
            result = subprocess.run(command, cwd=work, capture_output=True, text=True, errors="replace",
                                    timeout=timeout, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:  # subprocess.run has killed the JVM
            raise FlinkStateError(f"{jar}: main() or an operator's open() did not finish within {timeout:g} s (the "
                                  f"time limit; the JVM was stopped)") from None
        seconds = time.monotonic() - started
        if result.returncode != 0 or not out.exists():
            raise FlinkStateError(f"{jar}: {_failure_line(result, max_heap)}")
        return out.read_bytes(), seconds


def _failure_line(result: subprocess.CompletedProcess[str], max_heap: str) -> str:
    """The inspector's own error line, else what the JVM said last (main() calling System.exit, a JVM crash)."""
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    ours = [line[len(ERROR_PREFIX):] for line in lines if line.startswith(ERROR_PREFIX)]
    if ours:
        line = ours[-1]
    elif lines:
        line = f"the inspector's JVM exited with status {result.returncode}: {lines[-1].strip()}"
    else:
        line = (f"the inspector's JVM exited with status {result.returncode} and no message (did main() call "
                f"System.exit?)")
    if "OutOfMemoryError" in line:
        line += f" (the heap limit is {max_heap}: --max-heap)"
    return printable(line)


# -- reading its output ----------------------------------------------------------------------------------------------


def parse_inspection(data: bytes, jar: str, path: str, seconds: float, *, cached: bool) -> JarSchema:
    """The inspector's output (SchemaInspector's format), each state stream read with the savepoint readers."""
    reader = Reader(data, 0, path)
    try:
        magic = reader.utf()
        if magic != OUTPUT_MAGIC:
            raise reader.error(f"not the jar inspector's output (starts with {printable(magic[:40])!r})", 0)
        version = reader.i32()
        if version != OUTPUT_VERSION:
            raise reader.error(f"inspector output format {version}, expected {OUTPUT_VERSION} (rebuild the "
                               f"inspector)", 0)
        flink = reader.utf()
        job_name = reader.utf()
        count = reader.i32()
        operators = [_operator(reader, path) for _ in range(count)]
        layouts = _block(reader)
        if reader.remaining():
            raise reader.error(f"{reader.remaining()} bytes after the Kryo layouts")
        kryo_classes = layouts_from_json(json.loads(layouts.decode("utf-8")), f"{jar} (the inspector's output)")
    except (SavepointFormatError, ValueError) as exc:  # ValueError: the layouts' JSON
        raise FlinkStateError(f"{jar}: the inspector's output is unreadable: {exc}") from None
    return JarSchema(jar, flink, job_name, operators, seconds, cached, kryo_classes)


def _operator(reader: Reader, path: str) -> InspectedOperator:
    operator_id = reader.utf()
    uid = reader.utf() or None
    name = reader.utf()
    operator_class = reader.utf()
    opened = reader.bool()
    window = reader.utf() or None
    context = f"operator {printable(uid or operator_id)}"
    keyed_bytes = _block(reader)
    operator_bytes = _block(reader)
    keyed = read_stream_header(keyed_bytes, path, context) if keyed_bytes else None
    operator = None
    if operator_bytes:
        try:
            operator = read_operator_header(Reader(operator_bytes, 0, path))
        except SavepointFormatError as exc:
            raise exc.located(path, 0, context) from None
    return InspectedOperator(operator_id, uid, name, operator_class, opened, window, keyed, operator)


def _block(reader: Reader) -> bytes:
    start = reader.pos
    length = reader.i32()
    if length < 0 or length > reader.remaining():
        raise reader.error(f"implausible block length {length}", start)
    return reader.bytes(length)


# -- Flink's own restore of a savepoint into the jar's operators (check --trial) --------------------------------------

#: What the inspector's trial mode writes first (TrialRestore.MAGIC, FORMAT_VERSION).
TRIAL_MAGIC = "flinkstate-jar-trial"
TRIAL_VERSION = 2
#: Flink's outcomes for a state (TrialRestore): restored (as is, reconfigured, values migrated by the backend),
#: registered new, failed, or restored and never registered by the operator.
TRIAL_OUTCOMES = ("AS_IS", "RECONFIGURED", "AFTER_MIGRATION", "NEW", "FAILED", "NOT_REGISTERED")
#: Flink's names of its backends, as ``check --backend`` names them.
BACKEND_NAMES = {"HashMapStateBackend": "hashmap", "EmbeddedRocksDBStateBackend": "rocksdb"}


@dataclass(frozen=True)
class TrialState:
    """Flink's answer for one state of an operator (a keyed state, a timer queue, or an operator state:
    ``operator_state``): ``outcome`` one of :data:`TRIAL_OUTCOMES`, and the exception (class: message) when it
    failed."""

    name: str
    outcome: str
    error: str | None
    operator_state: bool = False

    @property
    def restorable(self) -> bool:
        return self.outcome != "FAILED"


@dataclass(frozen=True)
class TrialOperator:
    """One operator of the savepoint that the jar has, restored by Flink: ``restore_failure`` when the backend's
    restore failed (the key serializer, values that no longer read: the whole operator fails), ``open_failure``
    when its initialization or ``open()`` failed outside a state registration, else each state's answer."""

    operator_id: str
    uid: str | None
    name: str
    key_groups: int  # how many key groups of its keyed state were restored
    restore_failure: str | None
    open_failure: str | None
    states: list[TrialState]

    @property
    def labels(self) -> set[str]:
        return {label for label in (self.uid, self.operator_id) if label}

    def state(self, name: str, *, operator_state: bool = False) -> TrialState | None:
        """The answer for the keyed state (or timer queue) ``name``, or for the operator state (``operator_state``):
        the two are apart in Flink, and may share a name."""
        return next((state for state in self.states if state.name == name and state.operator_state == operator_state),
                    None)


@dataclass(frozen=True)
class TrialRestore:
    """Flink's own restore of a savepoint into the operators of a jar (the inspector's trial mode)."""

    jar: str
    savepoint: str
    flink_version: str
    backend: str  # Flink's class name (HashMapStateBackend, EmbeddedRocksDBStateBackend)
    key_groups: str  # "one" or "all"
    operators: list[TrialOperator]
    seconds: float

    @property
    def backend_name(self) -> str | None:
        """The backend as ``check --backend`` names it (None: another backend)."""
        return BACKEND_NAMES.get(self.backend)

    def find(self, label: str) -> TrialOperator | None:
        return next((op for op in self.operators if label in op.labels), None)


def trial_restore(jar: str | os.PathLike[str], savepoint: str | os.PathLike[str], *, full: bool = False,
                  backend: str | None = None, entry_class: str | None = None, program_args: Sequence[str] = (),
                  flink_home: str | os.PathLike[str] | None = None, parallelism: int = 1,
                  timeout: float = DEFAULT_TIMEOUT_SECONDS, max_heap: str = DEFAULT_MAX_HEAP) -> TrialRestore:
    """Restores ``savepoint`` (a local directory, or its ``_metadata``) into the operators of ``jar`` with Flink's
    own classes, in one inspector JVM (its ``main()`` run as for :func:`inspect_jar`): per operator one key group
    of its keyed state (the one with the most bytes), or all of them (``full``), on the backend the job configures
    (``backend``: "hashmap" or "rocksdb" instead), each of its states registered by the operator as it initializes
    and opens. Not cached: the answer depends on the savepoint."""
    jar_path = Path(jar)
    if not jar_path.is_file():
        raise FlinkStateError(f"{jar}: no such jar file")
    location = str(savepoint)
    if "://" in location and not location.startswith("file://"):
        raise FlinkStateError(f"{location}: the trial restore reads a local savepoint directory (copy it here "
                              f"first)")
    local = Path(location.removeprefix("file://"))
    if not (local / "_metadata").is_file() and not (local.name == "_metadata" and local.is_file()):
        raise FlinkStateError(f"{location}: no savepoint here (no _metadata file)")
    home = find_flink_home(flink_home)
    options = ["--trial", str(local.resolve()), "--key-groups", "all" if full else "one",
               "--backend", backend or "job"]
    data, seconds = _run_inspector(home, inspector_jar(home), jar_path, entry_class=entry_class,
                                   program_args=program_args, parallelism=parallelism, timeout=timeout,
                                   max_heap=max_heap, options=options)
    return parse_trial(data, str(jar), location, seconds)


def parse_trial(data: bytes, jar: str, savepoint: str, seconds: float) -> TrialRestore:
    """The inspector's trial output (TrialRestore's format)."""
    reader = Reader(data, 0, f"{jar} (trial output)")
    try:
        magic = reader.utf()
        if magic != TRIAL_MAGIC:
            raise reader.error(f"not the trial restore's output (starts with {printable(magic[:40])!r})", 0)
        version = reader.i32()
        if version != TRIAL_VERSION:
            raise reader.error(f"trial output format {version}, expected {TRIAL_VERSION} (rebuild the inspector)", 0)
        flink, backend, key_groups = reader.utf(), reader.utf(), reader.utf()
        operators = []
        for _ in range(reader.i32()):
            operator_id, uid, name = reader.utf(), reader.utf() or None, reader.utf()
            restored_groups = reader.i32()
            restore_failure, open_failure = reader.utf() or None, reader.utf() or None
            states = []
            for _ in range(reader.i32()):
                state, store, outcome, error = reader.utf(), reader.utf(), reader.utf(), reader.utf() or None
                if outcome not in TRIAL_OUTCOMES or store not in ("KEYED", "OPERATOR"):
                    raise reader.error(f"unknown outcome {printable(store)} {printable(outcome)!r} of state "
                                       f"{printable(state)!r}")
                states.append(TrialState(state, outcome, error, store == "OPERATOR"))
            operators.append(TrialOperator(operator_id, uid, name, restored_groups, restore_failure, open_failure,
                                           states))
        if reader.remaining():
            raise reader.error(f"{reader.remaining()} bytes after the last operator")
    except SavepointFormatError as exc:
        raise FlinkStateError(f"{jar}: the trial restore's output is unreadable: {exc}") from None
    return TrialRestore(jar, savepoint, flink, backend, key_groups, operators, seconds)


__all__ = ["DEFAULT_MAX_HEAP", "DEFAULT_TIMEOUT_SECONDS", "InspectedOperator", "JarSchema", "TrialOperator",
           "TrialRestore", "TrialState", "UnregisteredState", "default_cache_dir", "inspect_jar", "inspector_jar",
           "parse_inspection", "parse_trial", "trial_restore", "unregistered_states"]

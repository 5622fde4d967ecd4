"""``flinkstate cluster start|stop|status``: a local standalone Flink cluster in a work folder."""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

from flinkstate import LocalFlinkCluster

DEFAULT_WORK_DIR = os.path.join(".work", "cluster")
#: ``status``/``start``: some of the cluster's processes are up, others are not (0: all up, 1: none).
EXIT_DEGRADED = 3


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("cluster", help="start, stop or inspect a local Flink cluster",
                                   description="A standalone Flink cluster on 127.0.0.1 from the PyPI distribution.")
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    for action, help_text in (("start", "start (or keep) the cluster and wait for free task slots"),
                              ("stop", "stop exactly the processes this work folder started"),
                              ("status", "say whether the cluster runs, with its ports and REST overview")):
        sub = actions.add_parser(action, help=help_text)
        sub.add_argument("--work-dir", default=os.environ.get("FLINKSTATE_CLUSTER_DIR", DEFAULT_WORK_DIR),
                         help="the cluster's work folder (default: $FLINKSTATE_CLUSTER_DIR or %(default)s)")
        if action == "start":
            sub.add_argument("--flink-home", help="Flink distribution (default: $FLINK_HOME or .venv-flink's pyflink)")
            sub.add_argument("--rest-port", type=int, help="REST port (default: a free one)")
            sub.add_argument("--rpc-port", type=int, help="JobManager RPC port (default: a free one)")
            sub.add_argument("--slots", type=int, default=2, help="task slots (default: %(default)s)")
            sub.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                             help="extra Flink configuration option (repeatable)")
        sub.add_argument("--json", action="store_true", help="print JSON instead of text")
        sub.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    if args.action == "start":
        options = {}
        for item in args.set:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise SystemExit(f"flinkstate cluster start: --set expects KEY=VALUE, got {item!r}")
            options[key] = value
        cluster = LocalFlinkCluster(args.work_dir, flink_home=args.flink_home, rest_port=args.rest_port,
                                    rpc_port=args.rpc_port, slots=args.slots, options=options)
        cluster.start()
    elif args.action == "stop":
        return _stop(LocalFlinkCluster(args.work_dir), json_output=args.json)
    else:
        cluster = LocalFlinkCluster(args.work_dir)
    status = cluster.status()
    health = status.get("health", "stopped")
    if args.json:
        print(json.dumps(status, indent=2, default=str))
    elif health == "stopped":
        print(f"no Flink cluster running in {status['work_dir']}")
    else:
        overview = status.get("overview", {})
        title = "running" if health == "running" else "DEGRADED (not every process is up)"
        lines = [f"Flink {status['flink_version']} {title} in {status['work_dir']}",
                 f"  REST / web UI: {status['rest_url']}"
                 + (f" (not answering: {status['overview_error']})" if "overview_error" in status else "")]
        for name, process in status["processes"].items():
            lines.append(f"  {name}: pid {process['pid']}, {'running' if process['alive'] else 'NOT RUNNING'}")
        if overview:
            lines.append(f"  task managers: {overview.get('taskmanagers', '?')}, slots: "
                         f"{overview.get('slots-available', '?')} free of {overview.get('slots-total', '?')}, "
                         f"jobs running: {overview.get('jobs-running', '?')}")
        print("\n".join(lines))
    return {"running": 0, "degraded": EXIT_DEGRADED}.get(health, 1)


def _stop(cluster: LocalFlinkCluster, *, json_output: bool) -> int:
    """Stops the cluster and says what it stopped (status after a stop would always say that none runs)."""
    stopped = cluster.stop()
    if json_output:
        print(json.dumps({**cluster.status(), "stopped_pids": stopped}, indent=2, default=str))
    elif stopped:
        print(f"stopped the Flink cluster in {cluster.work_dir} (pids {', '.join(map(str, stopped))})")
    else:
        print(f"no Flink cluster was running in {cluster.work_dir}: nothing to stop")
    return 0

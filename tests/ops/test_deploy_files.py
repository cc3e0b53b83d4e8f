"""The shipped systemd, launchd and Kubernetes files parse, use real flags, and probe right."""

from __future__ import annotations

import configparser
import copy
import plistlib
import shlex
from pathlib import Path

import click
import pytest
import yaml

from gateway.cli import main
from tests.e2e.harness import ROOT
from worker.__main__ import parse_args as worker_args

DEPLOY = ROOT / "deploy"


def check_argv(argv: list[str]) -> None:
    """Parse a `rapid-mlx ...` command line as the CLI would; raise on unknown flags."""
    assert Path(argv[0]).name == "rapid-mlx", argv
    name, rest = argv[1], argv[2:]
    cmd = main.get_command(click.Context(main), name)
    assert cmd is not None, name
    if name == "worker":
        worker_args(rest)  # passed through to `python -m worker`
        return
    with cmd.make_context(name, rest) as sub:
        if name == "serve":
            params = sub.params
            assert params["models"], argv


def test_systemd_unit() -> None:
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # type: ignore[assignment, method-assign]
    unit.read(DEPLOY / "systemd" / "rapid-mlx.service")
    env = configparser.ConfigParser(interpolation=None)
    env.optionxform = str  # type: ignore[assignment, method-assign]
    env.read_string("[e]\n" + (DEPLOY / "systemd" / "rapid-mlx.env").read_text())
    svc = unit["Service"]
    line = svc["ExecStart"]
    for k, v in env["e"].items():  # systemd: $VAR splits into words, ${VAR} stays one word
        line = line.replace("${" + k + "}", shlex.quote(v)).replace("$" + k, v)
    check_argv(shlex.split(line))
    assert svc["KillSignal"] == "SIGTERM" and svc["KillMode"] == "mixed"
    assert int(svc["TimeoutStopSec"]) > 30  # longer than --shutdown-timeout
    assert svc["Restart"] == "always"


def test_launchd_plist() -> None:
    with open(DEPLOY / "launchd" / "com.rapid-mlx.server.plist", "rb") as f:
        plist = plistlib.load(f)
    check_argv(plist["ProgramArguments"])
    assert plist["KeepAlive"] is True and plist["ExitTimeOut"] > 30


def test_kubernetes_manifests() -> None:
    docs = [d for p in sorted((DEPLOY / "k8s").glob("*.yaml"))
            for d in yaml.safe_load_all(p.read_text()) if d]
    deployments = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Deployment"}
    services = {d["metadata"]["name"]: d for d in docs if d["kind"] == "Service"}
    gw = deployments["rapid-mlx-gateway"]["spec"]["template"]["spec"]
    c = gw["containers"][0]
    argv = [*c["command"], *c["args"]]
    check_argv(argv)
    assert "--no-spawn-workers" in argv and "--curve-dir" in argv
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert c["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert gw["terminationGracePeriodSeconds"] > 30
    assert services["rapid-mlx-workers"]["spec"]["publishNotReadyAddresses"] is True
    assert services["rapid-mlx"]["spec"]["selector"] == services["rapid-mlx-workers"]["spec"]["selector"]
    workers = [d for n, d in deployments.items() if n.startswith("rapid-mlx-worker-")]
    assert workers
    for w in workers:
        spec = w["spec"]
        assert spec["replicas"] == 1 and spec["strategy"]["type"] == "Recreate"
        wc = spec["template"]["spec"]["containers"][0]
        wargv = [*wc["command"], *wc["args"]]
        check_argv(wargv)
        args = worker_args(wargv[2:])
        assert args.connect.startswith("tcp://rapid-mlx-workers:")
        assert args.curve_server_key and args.curve_secret_file


def _k8s_docs() -> list[dict]:  # type: ignore[type-arg]
    return [d for p in sorted((DEPLOY / "k8s").glob("*.yaml"))
            for d in yaml.safe_load_all(p.read_text()) if d]


def test_kubernetes_manifests_match_the_kubernetes_schemas() -> None:
    kv = pytest.importorskip("kubernetes_validate")  # the dev extra installs it
    version = kv.latest_version()
    for doc in _k8s_docs():
        kv.validate(doc, version, strict=True)  # raises on an unknown or mistyped field
    bad = copy.deepcopy(next(d for d in _k8s_docs() if d["kind"] == "StatefulSet"))
    bad["spec"]["replicas"] = "two"
    with pytest.raises(kv.ValidationError):
        kv.validate(bad, version, strict=True)


def test_worker_statefulset_of_replicas() -> None:
    sets = [d for d in _k8s_docs() if d["kind"] == "StatefulSet"]
    assert len(sets) == 1
    spec = sets[0]["spec"]
    assert spec["replicas"] >= 2 and spec["updateStrategy"]["type"] == "RollingUpdate"
    pod = spec["template"]["spec"]
    wc = pod["containers"][0]
    wargv = [*wc["command"], *wc["args"]]
    check_argv(wargv)
    args = worker_args(wargv[2:])
    assert args.connect.startswith("tcp://rapid-mlx-workers:") and args.alias == "default"
    assert args.curve_server_key and args.curve_secret_file
    assert pod["terminationGracePeriodSeconds"] > 30  # longer than the worker's SIGTERM drain
    headless = [d for d in _k8s_docs() if d["kind"] == "Service"
                and d["metadata"]["name"] == spec["serviceName"]]
    assert headless and headless[0]["spec"]["clusterIP"] == "None"


def test_readme_documents_keys() -> None:
    text = (DEPLOY / "README.md").read_text()
    for needle in ("rapid-mlx keys", "--curve-dir", "--curve-server-key", "--curve-secret-file"):
        assert needle in text
    try:
        check_argv(["rapid-mlx", "serve", "m", "--no-such-flag"])
    except click.UsageError:
        return
    raise AssertionError("check_argv accepted an unknown flag")

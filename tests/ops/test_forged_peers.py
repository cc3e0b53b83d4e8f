"""Acceptance (issue 9, item 8): a foreign ZeroMQ DEALER on the worker socket, over ipc and over
tcp (with CURVE, and without it under --insecure-worker-transport), cannot take an alias over,
inject text into a live stream, end requests, or stop the gateway's event reader: nothing a
client sees changes, the worker keeps its boot id, /livez stays 200, and every frame the gateway
reads from the forger is counted in rapid_mlx_worker_plane_rejected_total."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
import zmq
import zmq.auth

from protocol import messages as m
from tests.e2e.harness import ROOT, Server, free_port
from tests.ops.harness import scrape

pytestmark = pytest.mark.slow

BODY = {"model": "default", "messages": [{"role": "user", "content": "Tell me a story"}],
        "max_tokens": 1200, "ignore_eos": True, "temperature": 0, "stream": True}


def _rejected(base: str) -> float:
    return sum(v for (name, _), v in scrape(base).items()
               if name == "rapid_mlx_worker_plane_rejected_total")


def _stream(url: str, seen_id: threading.Event | None = None,
            box: dict[str, Any] | None = None) -> str:
    """Stream BODY; return the text (an error event or a non-200 answer fails the test)."""
    text = []
    with httpx.stream("POST", f"{url}/chat/completions", json=BODY, timeout=120) as r:
        assert r.status_code == 200, r.read()
        for line in r.iter_lines():
            if not line.startswith("data: ") or line == "data: [DONE]":
                continue
            event = json.loads(line[6:])
            assert "error" not in event, event
            if box is not None and seen_id is not None and not seen_id.is_set():
                box["id"] = event["id"]
                seen_id.set()
            for choice in event["choices"]:
                text.append(choice["delta"].get("content") or "")
    return "".join(text)


class Forger:
    """A foreign DEALER, optionally a CURVE client with some key pair."""

    def __init__(self, ctx: zmq.Context[Any], address: str, identity: bytes | None,
                 curve: tuple[Path, Path] | None = None) -> None:
        self.sock = ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        if identity:
            self.sock.setsockopt(zmq.ROUTING_ID, identity)
        if curve is not None:
            server_key, secret_file = curve
            pub, sec = zmq.auth.load_certificate(secret_file)
            self.sock.curve_publickey, self.sock.curve_secretkey = pub, sec
            self.sock.curve_serverkey = zmq.auth.load_certificate(server_key)[0]
        self.sock.connect(address)

    def send(self, *frames: bytes) -> None:
        self.sock.send_multipart(list(frames), zmq.NOBLOCK)


def _forgeries(boot: str, request_id: str) -> list[list[bytes]]:
    """Every message a forger tries, each read by the gateway (one frame list per message)."""
    facts = m.ModelFacts(model="evil", context_length=2048, vocab_size=4096)
    out = m.RequestOutput(request_id=request_id, text=" INJECTED", token_ids=[7])
    end = m.RequestOutput(request_id=request_id, text=" END", token_ids=[7], finish_reason="stop")
    version = m.PROTOCOL_VERSION  # refused for the secret or the boot id, not the version
    return [
        [m.encode(m.Ready(alias="default", boot_id=boot, pid=1, protocol_version=version,
                          facts=facts, secret="guess"))],
        [m.encode(m.Ready(alias="default", boot_id="0" * 32, pid=1, protocol_version=version,
                          facts=facts))],
        [m.encode(m.StepOutputs(boot_id=boot, step=10**6, outputs=[out]))],
        [m.encode(m.StepOutputs(boot_id=boot, step=10**6 + 1, outputs=[end]))],
        [m.encode(m.Heartbeat(boot_id=boot, step=0, running=0, waiting=0))],
        [m.encode(m.Status(boot_id=boot, query_id="x", body={"pid": 1}))],
        [m.encode(m.Dead(alias="default", boot_id=boot, reason="forged"))],
        [b"two", b"frames"], [b"three", b"whole", b"frames"], [b"\xc1\xc1 not msgpack"], [b""],
    ]


def _attack(address: str, boot: str, request_id: str, curve: tuple[Path, Path] | None) -> int:
    """Send every forgery from several identities; return how many the gateway will read."""
    ctx: zmq.Context[Any] = zmq.Context()
    # the worker's visible id (alias:boot), another id of the alias, an unknown alias, none
    peers = [Forger(ctx, address, ident, curve)
             for ident in (f"default:{boot}".encode(), b"default:evil", b"nosuch:1", None)]
    huge = Forger(ctx, address, b"default:huge", curve)
    try:
        time.sleep(0.5)  # connected (and through the CURVE handshake)
        sent = 0
        for p in peers:
            for frames in _forgeries(boot, request_id):
                p.send(*frames)
                sent += 1
        huge.send(b"\x00" * (65 << 20))  # over MAXMSGSIZE: ZeroMQ drops the connection
        time.sleep(1.0)
        return sent
    finally:
        for p in [*peers, huge]:
            p.sock.close(0)
        ctx.term()


def _keys(tmp: Path) -> Path:
    keys = tmp / "keys"
    subprocess.run([sys.executable, "-m", "gateway", "keys", str(keys), "--worker", "w1"],
                   cwd=ROOT, check=True, capture_output=True, timeout=60)
    return keys


@pytest.mark.parametrize("transport", ["ipc", "tcp-curve", "tcp-insecure"])
def test_forged_peers_change_nothing(transport: str, tmp_path: Path) -> None:
    run = Path(tempfile.mkdtemp(prefix="rmlx-f-"))  # short: unix socket paths are limited
    curve: tuple[Path, Path] | None = None
    if transport == "ipc":
        address, extra = f"ipc://{run}/gw", []
    else:
        address = f"tcp://127.0.0.1:{free_port()}"
        if transport == "tcp-curve":
            keys = _keys(tmp_path)
            extra = ["--curve-dir", str(keys)]
            # the forger even holds an allowed worker key: still not the alias's worker
            curve = (keys / "server.key", keys / "workers" / "w1.key_secret")
        else:
            extra = ["--insecure-worker-transport"]
    srv = Server("--worker-address", address, *extra).wait_ready()
    try:
        clean = _stream(srv.url)
        before = srv.worker("default")
        rejected = _rejected(srv.base)
        seen, box = threading.Event(), {}
        result: dict[str, Any] = {}

        def victim() -> None:
            try:
                result["text"] = _stream(srv.url, seen, box)
            except BaseException as exc:  # reported below
                result["error"] = exc

        t = threading.Thread(target=victim)
        t.start()
        assert seen.wait(30)
        read = _attack(address, before["boot_id"], f"{box['id']}-0", curve)
        if transport == "tcp-curve":  # a forger without any key does not get through at all
            keyless = Forger(zmq.Context.instance(), address, b"default:evil")
            keyless.send(*_forgeries(before["boot_id"], "x")[2])
            time.sleep(0.5)
            keyless.sock.close(0)
        t.join(120)
        assert "error" not in result, result.get("error")
        assert result["text"] == clean  # nothing injected, nothing cut short

        after = srv.worker("default")
        assert (after["boot_id"], after["pid"], after["restarts"], after["state"]) == (
            before["boot_id"], before["pid"], before["restarts"], "ready")
        assert httpx.get(f"{srv.base}/livez", timeout=5).status_code == 200
        # every forged message was read and dropped (the worker's real routing id carries a tag
        # derived from its secret, so even `default:<boot>` is just another stranger)
        assert _rejected(srv.base) - rejected >= read
        assert _stream(srv.url) == clean  # and the alias still serves
    finally:
        srv.stop()
        shutil.rmtree(run, ignore_errors=True)

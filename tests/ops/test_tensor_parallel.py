"""Acceptance of issue 14 (tensor parallel): a group of 2 ranks over TCP loopback (the ring
backend) serves greedy output token-identical to a single worker, alone and 8 at a time, with
K8V4 off and on; killing either rank restarts the whole group and the next request succeeds.
Real servers, real workers, real weights (stories260K: Llama; the demo model: Qwen3)."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import psutil
import pytest

from tests.e2e.harness import Server
from tests.ops.harness import DEMO, wait_for

pytestmark = pytest.mark.slow

STORIES = "/work/shared/models/stories260K"
SHARED = ("Once upon a time, there was a little girl named Lily. She loved to play outside in "
          "the park with her friends. One day, she saw a big red ball under a tree. ")
PROMPTS = ["Once upon a time", "The little dog", "Lily and Ben went to the park. They saw",
           "One day, a big", "Tom had a red ball.", SHARED + "She", SHARED + "Her mom",
           SHARED + "The ball"]  # the last three share full KV pages: prefix-cache hits


def _serve(model: str, kv: str, *extra: str) -> Server:
    return Server(model, "--served-model-name", "m", "--kv-cache-turboquant", kv,
                  *extra).wait_ready(240)


def _complete(url: str, prompt: str, n: int = 48) -> tuple[str, int, str]:
    c = openai.OpenAI(base_url=url, api_key="x", timeout=120).completions.create(
        model="m", prompt=prompt, max_tokens=n, temperature=0)
    assert c.usage is not None
    return c.choices[0].text, c.usage.completion_tokens, c.choices[0].finish_reason


def _outputs(srv: Server) -> dict[str, list[tuple[str, int, str]]]:
    alone = [_complete(srv.url, p) for p in PROMPTS]
    with ThreadPoolExecutor(8) as ex:
        together = list(ex.map(lambda p: _complete(srv.url, p), PROMPTS))
    return {"alone": alone, "together": together}


def _ranks(srv: Server) -> dict[int, psutil.Process]:
    """The group's rank processes by rank (children of worker.tp.launch)."""
    out = {}
    for p in srv.tree():
        try:
            cmd, env = p.cmdline(), p.environ()
        except psutil.Error:
            continue
        if "MLX_RANK" in env and "worker" in cmd and "worker.tp.launch" not in cmd:
            out[int(env["MLX_RANK"])] = p
    return out


@pytest.mark.parametrize(("model", "kv"), [(STORIES, "none"), (DEMO, "none"), (DEMO, "k8v4")],
                         ids=["stories260K", "demo", "demo-k8v4"])
def test_greedy_output_matches_one_worker(model: str, kv: str) -> None:
    got, facts = {}, {}
    for ranks in (1, 2):
        srv = _serve(model, kv, *(("--tensor-parallel", "2") if ranks == 2 else ()))
        try:
            if ranks == 2:
                assert sorted(_ranks(srv)) == [0, 1]
            got[ranks] = _outputs(srv)
            facts[ranks] = srv.worker("m")
        finally:
            srv.stop()
    assert facts[2]["kv_format"] == facts[1]["kv_format"] == (kv if model == DEMO else "none")
    # each rank holds its half of the KV heads: rank 0's pages cost half a token's bytes
    assert facts[2]["kv_bytes_per_token"] * 2 == facts[1]["kv_bytes_per_token"], facts
    assert facts[2]["prefix_cache_hits"] > 0  # rank 0's radix cache shared pages on all ranks
    print(json.dumps({"single": got[1]["alone"][:2], "tp2": got[2]["alone"][:2]}))
    assert all(n > 0 for _, n, _ in got[1]["alone"])
    assert got[2]["alone"] == got[1]["alone"]
    assert got[2]["together"] == got[1]["together"]


def _stream(url: str, out: dict[str, object], started: threading.Event) -> None:
    body = {"model": "m", "prompt": "Once upon a time", "max_tokens": 400, "ignore_eos": True,
            "temperature": 0, "stream": True}
    chunks = 0
    try:
        with httpx.stream("POST", f"{url}/completions", json=body, timeout=60) as r:
            for line in r.iter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    event = json.loads(line[6:])
                    if "error" in event:
                        out["error"] = event["error"]
                        break
                    chunks += 1
                    if chunks >= 2:
                        started.set()
                elif line == "data: [DONE]":
                    out["done"] = True
    except httpx.HTTPError as exc:
        out["error"] = {"message": f"transport: {exc}"}
    out["ended_at"] = time.monotonic()


@pytest.mark.parametrize("victim", ["follower", "rank0", "stopped-follower"])
def test_a_lost_rank_restarts_the_group(victim: str) -> None:
    """SIGKILL of rank 1 or rank 0, or a SIGSTOPped rank 1 (rank 0 then hangs in a collective
    and the gateway's hang watchdog kills the group): the in-flight stream fails fast, the
    whole group goes, a new one comes up and serves."""
    srv = _serve(STORIES, "none", "--tensor-parallel", "2", "--hang-timeout", "3")
    try:
        ranks = _ranks(srv)
        assert sorted(ranks) == [0, 1]
        boot = srv.worker("m")["boot_id"]
        out: dict[str, object] = {}
        started = threading.Event()
        t = threading.Thread(target=_stream, args=(srv.url, out, started), daemon=True)
        t.start()
        assert started.wait(60)
        killed_at = time.monotonic()
        target = ranks[0 if victim == "rank0" else 1]
        os.kill(target.pid, signal.SIGSTOP if victim == "stopped-follower" else signal.SIGKILL)
        t.join(30)
        assert out.get("error") and not out.get("done"), out  # the in-flight stream failed
        took = float(out["ended_at"]) - killed_at  # type: ignore[arg-type]
        print(f"in-flight stream ended {took:.2f}s after the {victim} was hit: {out['error']}")
        assert took < 10, took
        for p in ranks.values():  # the whole group went down
            p.wait(15)
        wait_for(lambda: srv.worker("m")["boot_id"] not in (None, boot)
                 and srv.worker("m")["state"] == "ready", timeout=120)
        assert sorted(_ranks(srv)) == [0, 1]
        text, n, _ = _complete(srv.url, "Once upon a time", 16)
        assert n == 16 and text
    finally:
        srv.stop()


def _group_folder(srv: Server) -> Path:
    """The temp folder the group's ranks were handed (hostfile, plan socket)."""
    folders = {p.environ().get("RAPID_MLX_TP_DIR") for p in _ranks(srv).values()}
    assert len(folders) == 1 and None not in folders, folders
    return Path(str(folders.pop()))


def test_a_sigkilled_launchers_folder_is_removed_by_the_gateway() -> None:
    """The launcher (worker.tp.launch) SIGKILLed cannot remove the group's temp folder: the
    gateway, which made it, removes it when the group is gone, and the next group's on exit."""
    srv = _serve(STORIES, "none", "--tensor-parallel", "2")
    try:
        boot = srv.worker("m")["boot_id"]
        first = _group_folder(srv)
        assert (first / "hosts.json").is_file()
        launcher = next(p for p in srv.tree() if "worker.tp.launch" in p.cmdline())
        launcher.send_signal(signal.SIGKILL)
        wait_for(lambda: not first.exists(), timeout=30)
        wait_for(lambda: srv.worker("m")["boot_id"] not in (None, boot)
                 and srv.worker("m")["state"] == "ready", timeout=120)
        second = _group_folder(srv)
        assert second != first and second.is_dir()
        text, n, _ = _complete(srv.url, "Once upon a time", 16)
        assert n == 16 and text
    finally:
        srv.stop()
    assert not second.exists()


def test_hostfile_group_runs_through_mlx_launch(tmp_path: Path) -> None:
    """--tp-hostfile starts the ranks with mlx.launch itself (here both hosts are this one)."""
    hosts = tmp_path / "hosts.json"
    hosts.write_text(json.dumps([{"ssh": "127.0.0.1", "ips": ["127.0.0.1"]}] * 2))
    srv = _serve(STORIES, "none", "--tensor-parallel", "2", "--tp-hostfile", str(hosts))
    try:
        assert sorted(_ranks(srv)) == [0, 1]
        assert any("mlx.launch" in " ".join(p.cmdline()) for p in srv.tree())
        text, n, _ = _complete(srv.url, "Once upon a time", 16)
        assert text.startswith(", there was a little girl named Lily") and n == 16
    finally:
        srv.stop()


def test_a_model_that_does_not_split_is_refused() -> None:
    """8 heads over 3 ranks: rank 0 says why, the group exits 78 and so does the server."""
    srv = Server(STORIES, "--tensor-parallel", "3")
    code = srv.proc.wait(120)
    out = "".join(srv.lines)
    assert code == 78, out[-2000:]
    assert "8 attention heads and 4 KV heads do not split over 3 ranks" in out
    srv.stop()

"""/docs in a real headless browser (Debian's Chromium driven by Playwright): the page lists the
operations, "Try it out" on POST /v1/chat/completions gets a 200 from the running server, and the
browser fetches nothing from outside this server."""

from __future__ import annotations

import json
import os
from urllib.parse import urlsplit

import httpx
import pytest

from tests.e2e.harness import Server

pytestmark = pytest.mark.slow

CHROMIUM = "/usr/bin/chromium"  # deploy/ensure-test-browser.sh installs it (make install)
# without the background-networking flags Chromium keeps calling home
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
BODY = {"model": "default", "messages": [{"role": "user", "content": "Say hi."}],
        "max_tokens": 8}
CHAT = "#operations-default-post_v1_chat_completions"


@pytest.fixture(scope="module")
def browser():  # type: ignore[no-untyped-def]
    if not os.access(CHROMIUM, os.X_OK):
        pytest.skip(f"{CHROMIUM} is absent: run `sh deploy/ensure-test-browser.sh` as root (or "
                    "`sudo apt-get install chromium`) to run the /docs browser test")
    sync_api = pytest.importorskip("playwright.sync_api",
                                   reason="playwright is a dev dependency: pip install -e .[dev]")
    # `make test` preloads OpenBLAS for MLX (LD_PRELOAD): Playwright's driver and Chromium
    # crash with it, so they start without it
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("LD_PRELOAD", raising=False)
        pw = sync_api.sync_playwright().start()
        env = dict(os.environ)
    try:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=ARGS, env=env)
        yield b
        b.close()
    finally:
        pw.stop()


def test_try_it_out_on_chat_completions(server: Server, browser) -> None:  # type: ignore[no-untyped-def]
    fetched: list[str] = []
    page = browser.new_page()
    page.on("request", lambda r: fetched.append(r.url))
    try:
        page.goto(f"{server.base}/docs")
        page.wait_for_selector(".opblock-summary", timeout=30_000)
        listed = {" ".join(t.split()[:2]) for t in
                  page.locator(".opblock-summary").all_inner_texts()}
        spec = httpx.get(f"{server.base}/openapi.json").json()
        documented = {f"{m.upper()} {p}" for p, ops in spec["paths"].items() for m in ops}
        assert listed == documented
        assert {"POST /v1/chat/completions", "POST /v1/completions", "POST /v1/responses",
                "POST /v1/messages", "GET /v1/models"} <= listed

        op = page.locator(CHAT)
        op.locator(".opblock-summary").click()
        op.locator("button.try-out__btn").click()
        op.locator("textarea.body-param__text").fill(json.dumps(BODY))
        op.locator("button.execute").click()
        status = op.locator(".live-responses-table .response .response-col_status")
        status.wait_for(timeout=60_000)
        answer = op.locator(".live-responses-table .response-col_description pre").first
        text = answer.inner_text()
        if status.inner_text().strip() != "200":
            page.screenshot(path="/tmp/docs-browser-failure.png", full_page=True)
        assert status.inner_text().strip() == "200", text
        reply = json.loads(text)
        assert reply["object"] == "chat.completion" and reply["model"] == "default"
        assert reply["usage"]["completion_tokens"] <= 8
    finally:
        page.close()
    # everything came from this server: the page, Swagger UI's files, the document, the call
    assert f"{server.base}/v1/chat/completions" in fetched
    assert f"{server.base}/docs/static/swagger-ui-bundle.js" in fetched
    outside = [u for u in fetched if urlsplit(u).scheme in ("http", "https", "ws", "wss")
               and urlsplit(u).netloc != urlsplit(server.base).netloc]
    assert not outside, outside

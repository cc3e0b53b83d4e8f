"""`serve --compile-decode` and the alias key `compile_decode` through the real server and the
openai SDK: the setting reaches the worker (/v1/workers shows it), decode steps go through
compiled functions only where it is on, and the answers are the same either way."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import openai
import pytest

from tests.e2e.harness import Server
from tests.worker.spec.spec_helpers import PROMPTS
from worker.model.embedded import embedded_model_path

pytestmark = pytest.mark.slow
FP = ("--kv-cache-turboquant", "none", "--max-batch", "8")


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, Server]]:
    aliases = tmp_path_factory.mktemp("aliases") / "aliases.toml"
    aliases.write_text(f'[tinyc]\nrepo = "{embedded_model_path()}"\ncompile_decode = "auto"\n')
    off = Server(*FP, "--compile-decode", "off").wait_ready()
    try:  # the alias's own setting wins over the command line's
        auto = Server("tinyc", "--aliases", str(aliases), *FP, "--compile-decode", "off").wait_ready()
    except Exception:
        off.stop()
        raise
    yield off, auto
    auto.stop()
    off.stop()


async def _answers(server: Server, model: str) -> list[str]:
    client = openai.AsyncOpenAI(base_url=server.url, api_key="x")

    async def one(prompt: str) -> str:
        stream = await client.completions.create(model=model, prompt=prompt, max_tokens=40,
                                                 temperature=0, stream=True)
        return "".join([c.choices[0].text async for c in stream if c.choices])

    alone = [await one(p) for p in PROMPTS[:2]]
    together = await asyncio.gather(*(one(p) for p in PROMPTS[:8]))
    return alone + list(together)


def test_the_setting_reaches_the_worker_and_changes_what_runs(servers: tuple[Server, Server]
                                                             ) -> None:
    off, auto = servers
    assert off.worker("default")["compiled_decode_functions"] == 0
    warmed = auto.worker("tinyc")["compiled_decode_functions"]
    assert warmed >= 4  # the boot warm-up: one and two rows, one page and two (worker/serve/warmup.py)
    want = asyncio.run(_answers(off, "default"))
    assert asyncio.run(_answers(auto, "tinyc")) == want
    w_off, w_auto = off.worker("default"), auto.worker("tinyc")
    assert w_off["compile_decode"] == "off" and w_off["compiled_decode_functions"] == 0
    assert w_off["live"]["compile_decode_max_rows"] == 0
    assert w_auto["compile_decode"] == "auto" and w_auto["live"]["compile_decode_max_rows"] == 8
    assert w_auto["compiled_decode_functions"] > warmed, "no request's decode step ran compiled"
    assert w_auto["kv_format"] == w_off["kv_format"] == "none"


def test_serve_help_lists_the_setting() -> None:
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-m", "gateway", "serve", "--help"], text=True,
                         capture_output=True, cwd=Path(__file__).resolve().parents[2]).stdout
    assert "--compile-decode [auto|on|off]" in out

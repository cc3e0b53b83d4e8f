"""POST /v1/embeddings end to end on the real all-MiniLM-L6-v2: our conversion, the real server,
the openai SDK, checked against sentence-transformers (PyTorch) run in the reference venv."""

from __future__ import annotations

import base64
import threading
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
from transformers import AutoTokenizer

from tests.e2e.harness import Server
from tests.embed.refs import st_embed
from tests.spec_check import SpecCheck

pytestmark = pytest.mark.slow

SENTENCES = [
    "A man is playing a guitar on stage.",
    "Someone performs music with a guitar in front of an audience.",
    "The cat sleeps on the warm windowsill.",
    "A kitten is napping in the sun by the window.",
    "Interest rates rose again this quarter.",
    "The central bank increased borrowing costs.",
    "She is cooking pasta for dinner.",
    "Spaghetti is being prepared in the kitchen for the evening meal.",
    "The football match ended in a draw.",
    "Neither team won the soccer game.",
    "How do I reset my password?",
    "I forgot my login credentials and need to change them.",
    "Mount Everest is the highest mountain on Earth.",
    "The tallest peak in the world is in the Himalayas.",
    "Photosynthesis converts light into chemical energy.",
    "Plants use sunlight to make sugar.",
    "The train to Berlin is delayed by an hour.",
    "Quantum computers use qubits.",
    "hi",
    "Electric cars need charging stations along highways, and governments are funding "
    "networks of fast chargers so that long trips become practical for most drivers.",
]
LONG = " ".join(["the quick brown fox jumps over the lazy dog"] * 40)  # ~360 tokens > 256


def _unit(v: list[float] | np.ndarray) -> np.ndarray:
    a = np.asarray(v, dtype=np.float64)
    return a / np.linalg.norm(a)


def _cos(a: list[float] | np.ndarray, b: list[float] | np.ndarray) -> float:
    return float(_unit(a) @ _unit(b))


@pytest.fixture(scope="module")
def reference(minilm_src: Path) -> dict[str, list[float]]:
    """sentence-transformers' vectors of SENTENCES and LONG (it cuts LONG at 256 tokens)."""
    texts = [*SENTENCES, LONG]
    return dict(zip(texts, st_embed(minilm_src, texts), strict=True))


@pytest.fixture(scope="module")
def client(embed_server: Server) -> openai.OpenAI:
    return openai.OpenAI(base_url=embed_server.url, api_key="x", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def tokenizer(minilm: Path) -> object:
    return AutoTokenizer.from_pretrained(str(minilm))


def _post(srv: Server, body: dict) -> httpx.Response:
    return httpx.post(f"{srv.url}/embeddings", json=body, timeout=120)


def test_matches_sentence_transformers(client: openai.OpenAI, reference: dict,
                                       tokenizer: object) -> None:
    got = client.embeddings.create(model="minilm", input=SENTENCES)
    assert got.model == "minilm" and [d.index for d in got.data] == list(range(20))
    cosines = [_cos(d.embedding, reference[s]) for d, s in zip(got.data, SENTENCES, strict=True)]
    assert min(cosines) >= 0.999, cosines
    assert all(len(d.embedding) == 384 for d in got.data)
    assert all(abs(np.linalg.norm(d.embedding) - 1) < 1e-4 for d in got.data)  # Normalize module
    tokens = sum(len(tokenizer(s)["input_ids"]) for s in SENTENCES)  # type: ignore[operator]
    assert got.usage.prompt_tokens == got.usage.total_tokens == tokens


def test_base64_is_little_endian_float32(client: openai.OpenAI, embed_server: Server,
                                         reference: dict) -> None:
    raw = _post(embed_server, {"model": "minilm", "input": SENTENCES[:5],
                               "encoding_format": "base64"}).json()
    for d, s in zip(raw["data"], SENTENCES[:5], strict=True):
        vec = np.frombuffer(base64.b64decode(d["embedding"]), dtype="<f4")
        assert vec.shape == (384,) and _cos(vec, reference[s]) >= 0.999
    # the SDK asks for base64 itself when the caller leaves the format out, and decodes it
    sdk = client.embeddings.create(model="minilm", input=SENTENCES[0], encoding_format="base64")
    vec = np.frombuffer(base64.b64decode(sdk.data[0].embedding), dtype="<f4")  # type: ignore[arg-type]
    assert _cos(vec, reference[SENTENCES[0]]) >= 0.999


def test_body_conforms_to_openapi(embed_server: Server) -> None:
    check = SpecCheck(httpx.get(f"{embed_server.base}/openapi.json", timeout=30).json())
    for fmt in ("float", "base64"):
        r = _post(embed_server, {"model": "minilm", "input": ["a", "b"], "encoding_format": fmt})
        check.check("/v1/embeddings", "post", 200, r.json())
    r = _post(embed_server, {"model": "minilm", "input": "a", "dimensions": 8})
    check.check("/v1/embeddings", "post", 400, r.json())
    check.check("/v1/models", "get", 200, httpx.get(f"{embed_server.url}/models").json())
    worker = embed_server.worker("minilm")
    check.check("/v1/workers/{alias}", "get", 200, worker)
    assert worker["kind"] == "embed" and worker["live"]["embed"]["batches"] > 0


def test_similar_sentences_rank_above_unrelated(client: openai.OpenAI) -> None:
    vecs = [_unit(d.embedding) for d in client.embeddings.create(model="minilm",
                                                                 input=SENTENCES).data]
    for i in range(0, 16, 2):  # pairs (0,1), (2,3), ... paraphrase each other
        partner = vecs[i] @ vecs[i + 1]
        others = [vecs[i] @ vecs[j] for j in range(16) if j not in (i, i + 1)]
        assert partner > max(others), (SENTENCES[i], partner, max(others))


def test_dimensions_refused_for_minilm(client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="minilm", input="hello", dimensions=128)
    assert err.value.status_code == 400
    assert "does not support dimensions" in err.value.message
    assert err.value.body["param"] == "dimensions"  # type: ignore[index]


def test_token_id_inputs(client: openai.OpenAI, tokenizer: object, reference: dict) -> None:
    ids = [tokenizer(s)["input_ids"] for s in SENTENCES[:4]]  # type: ignore[operator]
    one = client.embeddings.create(model="minilm", input=ids[0])
    assert _cos(one.data[0].embedding, reference[SENTENCES[0]]) >= 0.999
    many = client.embeddings.create(model="minilm", input=ids)
    for d, s in zip(many.data, SENTENCES[:4], strict=True):
        assert _cos(d.embedding, reference[s]) >= 0.999
    assert many.usage.prompt_tokens == sum(len(i) for i in ids)
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="minilm", input=[[101, 30522, 102]])
    assert "vocabulary" in err.value.message


def test_over_length_is_400_unless_truncate(client: openai.OpenAI, reference: dict,
                                            tokenizer: object) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="minilm", input=["short", LONG])
    assert "256" in err.value.message and "truncate" in err.value.message
    assert err.value.body["param"] == "input"  # type: ignore[index]
    ids = tokenizer(LONG)["input_ids"]  # type: ignore[operator]
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="minilm", input=ids)
    got = client.embeddings.create(model="minilm", input=["short", LONG],
                                   extra_body={"truncate": True})
    assert _cos(got.data[1].embedding, reference[LONG]) >= 0.999  # sentence-transformers cuts too
    cut = client.embeddings.create(model="minilm", input=ids, extra_body={"truncate": True})
    assert _cos(cut.data[0].embedding, got.data[1].embedding) > 0.98  # first 256 ids, no [SEP]
    assert cut.usage.prompt_tokens == 256


def test_wrong_kind_is_400_both_ways(embed_server: Server, client: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as err:
        client.chat.completions.create(model="minilm", messages=[{"role": "user", "content": "hi"}])
    assert "embedding model" in err.value.message and "/v1/embeddings" in err.value.message
    with pytest.raises(openai.BadRequestError) as err:
        client.embeddings.create(model="chat", input="hello")
    assert "text-generation" in err.value.message and "embedding model" in err.value.message
    models = {m["id"]: m for m in httpx.get(f"{embed_server.url}/models").json()["data"]}
    assert models["minilm"]["kind"] == "embed" and models["minilm"]["dimensions"] == 384
    assert models["minilm"]["capabilities"] == ["embeddings"]  # no "dimensions": not Matryoshka
    assert models["minilm"]["context_length"] == 256 and models["chat"]["kind"] == "generate"


def test_concurrent_requests_all_correct(client: openai.OpenAI, reference: dict) -> None:
    results: dict[int, list[float]] = {}
    errors: list[BaseException] = []

    def work(k: int) -> None:
        try:
            texts = SENTENCES[k:] + SENTENCES[:k]  # each thread its own order and batch mix
            got = client.embeddings.create(model="minilm", input=texts)
            results[k] = min(_cos(d.embedding, reference[t])
                             for d, t in zip(got.data, texts, strict=True))
        except BaseException as exc:  # noqa: BLE001 - report it in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors and len(results) == 8 and min(results.values()) >= 0.999, (errors, results)


def test_bad_input_fails_alone_and_worker_survives(embed_server: Server,
                                                   client: openai.OpenAI) -> None:
    boot = embed_server.worker("minilm")["boot_id"]
    bad = [
        {"model": "minilm", "input": []},
        {"model": "minilm", "input": ""},
        {"model": "minilm", "input": ["ok", ""]},
        {"model": "minilm", "input": ["text", [1, 2]]},
        {"model": "minilm", "input": [[-1]]},
        {"model": "minilm", "input": "x", "encoding_format": "int8"},
        {"model": "minilm", "input": ["word " * 600]},  # passes the gateway, refused by the worker
        {"model": "minilm", "input": ["a"] * 2049},
        {"model": "minilm"},
    ]
    for body in bad:
        r = _post(embed_server, body)
        assert r.status_code == 400, (body, r.text)
        assert r.json()["error"]["type"] == "invalid_request_error"
    got = client.embeddings.create(model="minilm", input="still alive")
    assert len(got.data[0].embedding) == 384
    assert embed_server.worker("minilm")["boot_id"] == boot

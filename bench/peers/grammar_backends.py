"""Grammar backends compared: compile time and per-token mask time on four vocabularies.

    python -m bench.peers.grammar_backends [--backends llguidance,xgrammar,outlines_core] [--json out]

Vocabularies: the demo model's (4,096), stories260K's (512), offline stand-ins for Qwen3
(151,669) and Llama 3 (128,256) built by ``bench.peers.big_vocab``, and the real Qwen3 and Llama 3
vocabularies from their tiktoken files (``bench.peers.real_vocab``; skipped when the files are absent).
``--vocabs real`` (or ``demo,stories,stand-in``) picks a subset.  For each schema, each backend
compiles it from scratch (compile time; a fresh compiler, so no cache), then walks the tokens of a
valid instance: at every position it fills the next-token bitmask (timed: p50/p99 over all
positions) and advances by the instance's token.  xgrammar needs torch: run this module in a
throwaway venv that has it (see bench/README.md); the project itself never depends on torch.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from bench.peers import real_vocab
from bench.peers.big_vocab import FAMILIES, build, eos_id

ROOT = Path(__file__).resolve().parents[2]

SCHEMAS: dict[str, tuple[dict[str, Any], Any]] = {
    "flat": ({"type": "object", "properties": {"name": {"type": "string"},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False},
             {"name": "Ada Lovelace", "age": 36}),
    "nested": ({"type": "object", "additionalProperties": False, "required": ["user", "items"],
                "properties": {
                    "user": {"type": "object", "additionalProperties": False,
                             "required": ["id", "email"],
                             "properties": {"id": {"type": "integer", "minimum": 1},
                                            "email": {"type": "string",
                                                      "pattern": "^[a-z]+@[a-z]+\\.com$"}}},
                    "items": {"type": "array", "minItems": 1, "maxItems": 4, "items": {
                        "type": "object", "additionalProperties": False,
                        "required": ["sku", "qty", "kind"],
                        "properties": {"sku": {"type": "string", "maxLength": 12},
                                       "qty": {"type": "number", "minimum": 0, "maximum": 99},
                                       "kind": {"enum": ["book", "pen", "lamp"]}}}}}},
               {"user": {"id": 7, "email": "ada@example.com"},
                "items": [{"sku": "A-17", "qty": 2, "kind": "book"},
                          {"sku": "B-3", "qty": 1.5, "kind": "lamp"}]}),
    "anyof": ({"type": "object", "additionalProperties": False, "required": ["result"],
               "properties": {"result": {"anyOf": [
                   {"type": "object", "required": ["ok"], "additionalProperties": False,
                    "properties": {"ok": {"type": "boolean"}, "note": {"type": "string"}}},
                   {"type": "object", "required": ["error"], "additionalProperties": False,
                    "properties": {"error": {"type": "string"},
                                   "code": {"type": "integer"}}}]}}},
              {"result": {"error": "not found, try again later", "code": 404}}),
    "json_object": ({"type": "object"},
                    {"title": "A free object", "values": [1, 2.5, True, None], "x": {"y": "z"}}),
}


REAL = "tiktoken:"  # a vocabulary source naming a real_vocab family instead of tokenizer.json


def vocabularies(kinds: str = "demo,stories,stand-in,real") -> dict[str, tuple[str, int]]:
    """name -> (tokenizer.json text or REAL + family, eos id)."""
    out = {}
    if "real" in kinds:
        for family in real_vocab.FAMILIES:
            if real_vocab.available(family):
                eos = real_vocab.eos_id(family, real_vocab.encoding(family))
                out[f"{family} real"] = (REAL + family, eos)
            else:
                print(f"{family} real: no tokenizer file (deploy/ensure-tokenizer-files.sh)",
                      file=sys.stderr)
    out.update(_json_vocabularies(kinds))
    return out


def _json_vocabularies(kinds: str) -> dict[str, tuple[str, int]]:
    out = {}
    demo = ROOT / "worker" / "model" / "demo" / "weights" / "tokenizer.json"
    if "demo" in kinds:
        out["demo (4k)"] = (demo.read_text(), _added_id(demo, "<|im_end|>"))
    stories = ROOT.parent / "shared" / "models" / "stories260K" / "tokenizer.json"
    if stories.exists() and "stories" in kinds:
        out["stories260K (512)"] = (stories.read_text(), _added_id(stories, "</s>"))
    for family in FAMILIES if "stand-in" in kinds else ():
        path = build(family)
        out[f"{family} (~{FAMILIES[family][0] // 1000}k)"] = (path.read_text(), eos_id(family, path))
    return out


def _added_id(path: Path, content: str) -> int:
    data = json.loads(path.read_text())
    found = [t["id"] for t in data.get("added_tokens", []) if t["content"] == content]
    return found[0] if found else int(data["model"]["vocab"].get(content, 0))


def instance_tokens(tok_json: str, text: str) -> list[int]:
    """The instance's tokens as llguidance's canonical tokenization gives them."""
    return list(_llg_tokenizer(tok_json, None).tokenize_str(text))


def _llg_tokenizer(source: str, eos: int | None) -> Any:
    """An LLTokenizer for a tokenizer.json text or a real tiktoken vocabulary (cached)."""
    import llguidance

    def make() -> Any:
        if source.startswith(REAL):
            return real_vocab.lltokenizer(source[len(REAL):])[0]
        return llguidance.LLTokenizer(source, eos_token=eos)
    return _cached("llg", source, make)


def _real_vocab(source: str) -> tuple[list[bytes], set[int], int]:
    """(the byte string of every id, the special ids, logits width) of a real vocabulary."""
    family = source[len(REAL):]
    enc = real_vocab.encoding(family)
    width = real_vocab.FAMILIES[family][4]
    table = [b""] * width
    for b, i in enc._mergeable_ranks.items():
        table[i] = b
    specials = set(enc._special_tokens.values())
    for text, i in enc._special_tokens.items():
        table[i] = text.encode()
    return table, specials, width


# ---- backends: each returns (compile seconds, per-token mask seconds, tokens accepted) -------

def run_llguidance(tok_json: str, eos: int, schema: dict[str, Any], ids: list[int]) -> tuple[float, list[float], int]:
    """llguidance: LLMatcher over an LLTokenizer; masks via unsafe_compute_mask_ptr."""
    import llguidance

    tok = _llg_tokenizer(tok_json, eos)
    t0 = time.perf_counter()
    m = llguidance.LLMatcher(tok, llguidance.LLMatcher.grammar_from_json_schema(schema),
                             log_level=0)
    compile_s = time.perf_counter() - t0
    assert not m.is_error(), m.get_error()
    bits = np.zeros(((tok.vocab_size + 31) // 32,), dtype=np.int32)
    fresh = m.deep_copy()  # what the worker's cache hands a request: lexer states built lazily
    for walker in (m, fresh):  # are shared, so the second walk is the steady state
        times, n = [], 0
        for t in ids:
            t0 = time.perf_counter()
            walker.unsafe_compute_mask_ptr(bits.ctypes.data, bits.nbytes)
            times.append(time.perf_counter() - t0)
            if not walker.consume_token(t):
                break
            n += 1
        COLD.setdefault("llguidance", times)
    return compile_s, times, n


def run_xgrammar(tok_json: str, eos: int, schema: dict[str, Any], ids: list[int]) -> tuple[float, list[float], int]:
    """xgrammar: GrammarCompiler.compile_json_schema, GrammarMatcher.fill_next_token_bitmask."""
    import xgrammar as xgr

    def info() -> Any:
        if tok_json.startswith(REAL):  # raw byte tokens; specials as "" (xgrammar: special)
            table, specials, width = _real_vocab(tok_json)
            return xgr.TokenizerInfo([b"" if i in specials else b for i, b in enumerate(table)],
                                     vocab_type=xgr.VocabType.RAW, vocab_size=width,
                                     stop_token_ids=[eos])
        data = json.loads(tok_json)
        vocab = dict(data["model"]["vocab"])
        for t in data.get("added_tokens", []):
            vocab[t["content"]] = t["id"]
        encoded = [""] * (max(vocab.values()) + 1)
        for s, i in vocab.items():
            encoded[i] = s
        kind = (xgr.VocabType.BYTE_FALLBACK if data["model"].get("byte_fallback")
                else xgr.VocabType.BYTE_LEVEL)
        return xgr.TokenizerInfo(encoded, vocab_type=kind, stop_token_ids=[eos],
                                 add_prefix_space=kind == xgr.VocabType.BYTE_FALLBACK)

    tinfo = _cached("xgr", tok_json, info)
    compiler = xgr.GrammarCompiler(tinfo, max_threads=1, cache_enabled=False)
    t0 = time.perf_counter()
    compiled = compiler.compile_json_schema(json.dumps(schema), any_whitespace=False,
                                            separators=(",", ":"))
    compile_s = time.perf_counter() - t0
    m = xgr.GrammarMatcher(compiled)
    bits = xgr.allocate_token_bitmask(1, tinfo.vocab_size)
    times, n = [], 0
    for t in ids:
        t0 = time.perf_counter()
        m.fill_next_token_bitmask(bits)
        times.append(time.perf_counter() - t0)
        if not m.accept_token(t):
            break
        n += 1
    return compile_s, times, n


def run_outlines_core(tok_json: str, eos: int, schema: dict[str, Any], ids: list[int]) -> tuple[float, list[float], int]:
    """outlines-core: regex from the schema, an Index over the vocabulary, a Guide walking it."""
    from outlines_core import Guide, Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    def vocab() -> Any:
        from tokenizers import Tokenizer

        if tok_json.startswith(REAL):
            ids, specials, _ = _real_vocab(tok_json)
            real: dict[bytes, list[int]] = {}
            for i, b in enumerate(ids):
                if b and i not in specials:
                    real.setdefault(b, []).append(i)
            return Vocabulary(eos, real)

        tk = Tokenizer.from_str(tok_json)
        table: dict[bytes, list[int]] = {}
        for i in range(tk.get_vocab_size()):
            if i == eos:
                continue
            b = tk.decode([i], skip_special_tokens=False).encode()
            table.setdefault(b, []).append(i)
        return Vocabulary(eos, table)

    voc = _cached("oc", tok_json, vocab)
    t0 = time.perf_counter()
    index = Index(build_regex_from_schema(json.dumps(schema), r"[ ]?"), voc)
    compile_s = time.perf_counter() - t0
    guide = Guide(index)
    bits = np.zeros(((len(voc) + 31) // 32 + 1,), dtype=np.int32)
    times, n = [], 0
    for t in ids:
        t0 = time.perf_counter()
        guide.write_mask_into(bits.ctypes.data, bits.size, 4)
        times.append(time.perf_counter() - t0)
        try:
            guide.advance(t)
        except Exception:
            break
        n += 1
    return compile_s, times, n


BACKENDS: dict[str, Callable[..., tuple[float, list[float], int]]] = {
    "llguidance": run_llguidance, "xgrammar": run_xgrammar, "outlines_core": run_outlines_core}
_CACHE: dict[tuple[str, int], Any] = {}
COLD: dict[str, list[float]] = {}  # a backend's first walk, when it reports a warm one


def _cached(kind: str, tok_json: str, make: Callable[[], Any]) -> Any:
    key = (kind, hash(tok_json))
    if key not in _CACHE:
        _CACHE[key] = make()
    return _CACHE[key]


def pct(xs: list[float], q: float) -> float:
    """The Q-quantile of XS (nearest rank)."""
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] if s else float("nan")


def main() -> None:
    """Measure every backend on every vocabulary and schema; print a markdown table."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default=",".join(BACKENDS))
    ap.add_argument("--vocabs", default="demo,stories,stand-in,real")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    rows = []
    print("| vocabulary | schema | backend | compile ms | mask p50 us | mask p99 us | "
          "first walk p99 us | tokens |")
    print("|---|---|---|---:|---:|---:|---:|---|")
    for vname, (tok_json, eos) in vocabularies(args.vocabs).items():
        for sname, (schema, example) in SCHEMAS.items():
            ids = instance_tokens(tok_json, json.dumps(example, separators=(",", ":")))
            for bname in args.backends.split(","):
                COLD.clear()
                if bname == "outlines_core" and sname == "json_object" and vname.startswith(
                        tuple(FAMILIES)):
                    print(f"| {vname} | {sname} | {bname} | skipped: over 60 s on 4k | | | | |")
                    continue
                try:
                    comp, times, n = BACKENDS[bname](tok_json, eos, schema, ids)
                except Exception as exc:  # a backend missing or failing is a result too
                    print(f"| {vname} | {sname} | {bname} | error: {str(exc)[:60]} | | | | |")
                    continue
                row = {"vocab": vname, "schema": sname, "backend": bname, "compile_ms": comp * 1e3,
                       "p50_us": pct(times, 0.5) * 1e6, "p99_us": pct(times, 0.99) * 1e6,
                       "mean_us": statistics.fmean(times) * 1e6 if times else 0.0,
                       "accepted": n, "tokens": len(ids),
                       "cold_p99_us": pct(COLD.get(bname, times), 0.99) * 1e6}
                rows.append(row)
                print(f"| {vname} | {sname} | {bname} | {row['compile_ms']:.1f} | "
                      f"{row['p50_us']:.0f} | {row['p99_us']:.0f} | {row['cold_p99_us']:.0f} | "
                      f"{n}/{len(ids)} |", flush=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    print(file=sys.stderr)


if __name__ == "__main__":
    main()

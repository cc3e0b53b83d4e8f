"""Client side of `rapid-mlx status` and `rapid-mlx swap`: talk to a running server over HTTP."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


class OpsError(Exception):
    """A server answered with an error, or could not be reached."""


def call(url: str, path: str, *, key: str | None = None, body: dict[str, Any] | None = None,
         timeout: float = 30.0) -> tuple[int, dict[str, Any]]:
    """GET (or POST BODY to) URL+PATH; return (status, JSON body) for 2xx, raise OpsError else."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url.rstrip("/") + path, data=data,
                                 method="POST" if data is not None else "GET")
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, json.loads(resp.read() or b"{}")
    except urllib.error.HTTPError as exc:
        try:
            message = json.loads(exc.read())["error"]["message"]
        except (ValueError, KeyError, TypeError):
            message = exc.reason
        raise OpsError(f"HTTP {exc.code}: {message}") from exc
    except (urllib.error.URLError, OSError) as exc:
        raise OpsError(f"cannot reach {url}: {exc}") from exc


def _num(v: Any, fmt: str = "{:g}") -> str:
    return "-" if v is None else fmt.format(v)


def _age(ts: float | None) -> str:
    return "-" if not ts else f"{max(time.time() - ts, 0):.1f}s ago"


COLUMNS = ("ALIAS", "STATE", "PID", "BOOT", "MODEL", "UPTIME", "RESTARTS", "RUN", "WAIT",
           "KV USED/FREE", "KV", "PREFIX HIT", "PREFILL/s", "DECODE/s", "LAST STEP")


def rows(workers: list[dict[str, Any]]) -> list[tuple[str, ...]]:
    """One table row per worker description from GET /v1/workers."""
    out: list[tuple[str, ...]] = []
    for w in workers:
        model = w.get("model") or "-"
        if w.get("revision"):
            model += f"@{w['revision']}"
        kv = f"{_num(w.get('kv_pages_used'))}/{_num(w.get('kv_pages_free'))}"
        rate = w.get("prefix_cache_hit_rate")
        out.append((w["alias"], w["state"], _num(w.get("pid")), (w.get("boot_id") or "-")[:8],
                    model, _num(w.get("uptime_s"), "{:.0f}s"), str(w.get("restarts", 0)),
                    str(w.get("running", 0)), str(w.get("waiting", 0)), kv,
                    w.get("kv_format") or "none", _num(rate, "{:.0%}"),
                    _num(w.get("prefill_tokens_per_s"), "{:.0f}"),
                    _num(w.get("decode_tokens_per_s"), "{:.0f}"), _age(w.get("last_step_at"))))
    return out


def table(workers: list[dict[str, Any]], verbose: bool = False) -> str:
    """The worker list as an aligned text table, with exits and (VERBOSE) per-request lines."""
    body = rows(workers)
    widths = [max(len(c), *(len(r[i]) for r in body)) if body else len(c)
              for i, c in enumerate(COLUMNS)]
    lines = ["  ".join(c.ljust(widths[i]) for i, c in enumerate(r)).rstrip()
             for r in [COLUMNS, *body]]
    for w in workers:
        if w.get("last_exit"):
            lines.append(f"{w['alias']}: last exit: {w['last_exit']}")
        if verbose and w.get("redacted"):
            lines.append(f"  {w['alias']}: requests hidden from an API key; pass the admin key")
        for r in (w.get("requests") or []) if verbose else []:
            lines.append(f"  {w['alias']} {r.get('id')} {r.get('phase')} "
                         f"tokens={r.get('tokens')} age={r.get('age_s')}s")
    return "\n".join(lines)

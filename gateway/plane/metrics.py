"""Prometheus metrics with vLLM's meanings under the `rapid_mlx_` prefix, owned by the gateway.

Counters and histograms live in the gateway process, so they survive worker restarts. Gauges
(running, waiting, KV usage, worker up) are read from the hub at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Histogram,
    disable_created_metrics,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from protocol.messages import RequestOutput

if TYPE_CHECKING:
    from gateway.plane.state import AliasState, Stream

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
_L = ["model_name"]
_STATES = ("starting", "ready", "draining", "stopped", "failed")
_TTFT = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
         10.0, 20.0, 40.0, 80.0)
_ITL = (0.001, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5,
        5.0, 10.0, 20.0, 40.0, 80.0)
_E2E = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
        240.0, 480.0, 960.0, 1920.0, 7680.0)


@dataclass
class PrefixTotals:
    """Prompt tokens queried and served from the prefix cache, for one alias."""

    queries: int = 0
    hits: int = 0


class _LiveGauges(Collector):
    """Scrape-time gauges read from the hub's alias states."""

    def __init__(self, aliases: Callable[[], Iterable[AliasState]]) -> None:
        self.aliases = aliases

    def collect(self) -> Iterator[GaugeMetricFamily]:
        running = GaugeMetricFamily("rapid_mlx_num_requests_running",
                                    "Number of requests in the model execution batch.", labels=_L)
        waiting = GaugeMetricFamily("rapid_mlx_num_requests_waiting",
                                    "Number of requests waiting to be processed.", labels=_L)
        kv = GaugeMetricFamily("rapid_mlx_kv_cache_usage_perc",
                               "KV-cache usage. 1 means 100 percent usage.", labels=_L)
        states = GaugeMetricFamily("rapid_mlx_state_slots_usage_perc",
                                   "Recurrent-state slots in use (a hybrid model's linear-attention "
                                   "layers: running requests and prefix-cache snapshots). 1 means "
                                   "100 percent usage.", labels=_L)
        snapshots = GaugeMetricFamily("rapid_mlx_state_snapshots",
                                      "Recurrent-state snapshots the prefix cache holds.", labels=_L)
        up = GaugeMetricFamily("rapid_mlx_worker_ready",
                               "1 while the alias has a ready worker, else 0.", labels=_L)
        state = GaugeMetricFamily("rapid_mlx_worker_state",
                                  "1 for the alias's current state (starting, ready, draining, "
                                  "stopped, failed).", labels=[*_L, "state"])
        per = _ReplicaGauges()
        for st in self.aliases():
            beats = [r.heartbeat for r in st.replicas.values()
                     if r.identity is not None and r.heartbeat is not None]
            running.add_metric([st.alias], sum(hb.running for hb in beats))
            waiting.add_metric([st.alias], sum(hb.waiting for hb in beats))
            used, total = sum(hb.kv_used for hb in beats), sum(hb.kv_total for hb in beats)
            kv.add_metric([st.alias], used / total if total else 0.0)
            if any(hb.state_total for hb in beats):
                slots = sum(hb.state_total for hb in beats)
                states.add_metric([st.alias], sum(hb.state_used for hb in beats) / slots)
                snapshots.add_metric([st.alias], sum(hb.state_snapshots for hb in beats))
            up.add_metric([st.alias], 1 if st.state == "ready" and st.ready_replicas() else 0)
            for name in _STATES:
                state.add_metric([st.alias, name], 1 if st.state == name else 0)
            per.add(st)
        yield from (running, waiting, kv, states, snapshots, up, state, *per.families)


class _ReplicaGauges:
    """Per-replica gauges: a new family (`rapid_mlx_replica_*`, labels model_name and replica)
    so the per-alias series above keep their labels."""

    def __init__(self) -> None:
        labels = [*_L, "replica"]
        self.running = GaugeMetricFamily("rapid_mlx_replica_requests_running",
                                         "Requests in the replica's batch.", labels=labels)
        self.waiting = GaugeMetricFamily("rapid_mlx_replica_requests_waiting",
                                         "Requests in the replica's wait queue.", labels=labels)
        self.in_flight = GaugeMetricFamily("rapid_mlx_replica_in_flight",
                                           "Requests the gateway has in flight on the replica.",
                                           labels=labels)
        self.ready = GaugeMetricFamily("rapid_mlx_replica_ready",
                                       "1 while the replica takes new requests.", labels=labels)
        self.hit = GaugeMetricFamily("rapid_mlx_replica_prefix_hit_rate",
                                     "Share of the route-key text sent to the replica that its "
                                     "approximate prefix tree already held.", labels=labels)
        self.families = [self.running, self.waiting, self.in_flight, self.ready, self.hit]

    def add(self, st: AliasState) -> None:
        """Add every replica of ST."""
        for r in st.replicas.values():
            key = [st.alias, r.name]
            hb = r.heartbeat if r.identity is not None else None
            self.running.add_metric(key, hb.running if hb else 0)
            self.waiting.add_metric(key, hb.waiting if hb else 0)
            self.in_flight.add_metric(key, len(r.streams))
            self.ready.add_metric(key, 1 if r.routable else 0)
            self.hit.add_metric(key, r.hit_rate or 0.0)


class Metrics:
    """Every gateway metric in one per-app registry; the hub calls the recording methods."""

    def __init__(self, aliases: Callable[[], Iterable[AliasState]]) -> None:
        disable_created_metrics()  # type: ignore[no-untyped-call]  # no `_created` series
        r = self.registry = CollectorRegistry()
        self._token_series: dict[str, tuple[Any, Any]] = {}  # per alias, see _per_token
        self.prompt_tokens = Counter("rapid_mlx_prompt_tokens", "Number of prefill tokens processed.",
                                     _L, registry=r)
        self.generation_tokens = Counter("rapid_mlx_generation_tokens",
                                         "Number of generation tokens processed.", _L, registry=r)
        self.success = Counter("rapid_mlx_request_success",
                               "Count of finished requests, by finish reason (stop, length, "
                               "tool_calls, abort).", [*_L, "finished_reason"], registry=r)
        self.errors = Counter("rapid_mlx_request_errors",
                              "Count of requests that ended with an error, by error code.",
                              [*_L, "code"], registry=r)
        self.ttft = Histogram("rapid_mlx_time_to_first_token_seconds",
                              "Histogram of time to first token in seconds.", _L, buckets=_TTFT,
                              registry=r)
        self.itl = Histogram("rapid_mlx_inter_token_latency_seconds",
                             "Histogram of inter-token latency in seconds.", _L, buckets=_ITL,
                             registry=r)
        self.e2e = Histogram("rapid_mlx_e2e_request_latency_seconds",
                             "Histogram of end to end request latency in seconds.", _L,
                             buckets=_E2E, registry=r)
        self.queue = Histogram("rapid_mlx_request_queue_time_seconds",
                               "Histogram of time requests spent in the engine's wait queue "
                               "in seconds.", _L, buckets=_E2E, registry=r)
        self.gateway_wait = Histogram("rapid_mlx_request_gateway_wait_seconds",
                                      "Histogram of time spent waiting for a ready worker "
                                      "(restart or swap) in seconds.", _L, buckets=_E2E,
                                      registry=r)
        self.prefix_queries = Counter("rapid_mlx_prefix_cache_queries",
                                      "Prefix-cache queries, in prompt tokens.", _L, registry=r)
        self.prefix_hits = Counter("rapid_mlx_prefix_cache_hits",
                                   "Prefix-cache hits, in prompt tokens.", _L, registry=r)
        self.restarts = Counter("rapid_mlx_worker_restarts", "Worker process restarts.", _L,
                                registry=r)
        self.plane_rejected = Counter("rapid_mlx_worker_plane_rejected",
                                      "Frames from the worker socket dropped, by reason (not "
                                      "from the alias's current worker, unauthenticated, "
                                      "malformed).", ["reason"], registry=r)
        self.spec_drafted = Counter("rapid_mlx_spec_decode_num_draft_tokens",
                                    "Draft tokens verified by speculative decoding.",
                                    [*_L, "drafter"], registry=r)
        self.spec_accepted = Counter("rapid_mlx_spec_decode_num_accepted_tokens",
                                     "Draft tokens accepted by speculative decoding.",
                                     [*_L, "drafter"], registry=r)
        self.routed_total = Counter("rapid_mlx_replica_requests_routed",
                                    "Requests the router sent to each replica.",
                                    [*_L, "replica"], registry=r)
        self.retries = Counter("rapid_mlx_replica_retries",
                               "Requests resent to another replica (or the next worker) because "
                               "the one they were sent to left before answering.", _L,
                               registry=r)
        r.register(_LiveGauges(aliases))
        self.prefix: dict[str, PrefixTotals] = {}

    def declare(self, alias: str) -> None:
        """Create the alias's series at zero so they exist before the first request."""
        for c in (self.prompt_tokens, self.generation_tokens, self.ttft, self.itl, self.e2e,
                  self.queue, self.gateway_wait, self.prefix_queries, self.prefix_hits,
                  self.restarts):
            c.labels(alias)
        self.prefix.setdefault(alias, PrefixTotals())

    def render(self) -> bytes:
        """The text exposition of every metric."""
        return generate_latest(self.registry)

    def queued(self, alias: str, seconds: float) -> None:
        """A request waited SECONDS for a ready worker before it was submitted."""
        self.gateway_wait.labels(alias).observe(seconds)

    def rejected(self, alias: str, code: str) -> None:
        """A request was refused before reaching a worker."""
        self.errors.labels(alias, code).inc()

    def dropped(self, reason: str) -> None:
        """A frame from the worker socket was dropped for REASON."""
        self.plane_rejected.labels(reason).inc()

    def routed(self, alias: str, replica: str) -> None:
        """The router sent a request of ALIAS to REPLICA."""
        self.routed_total.labels(alias, replica).inc()

    def retried(self, alias: str) -> None:
        """A request of ALIAS was kept to be resent (its replica left before answering)."""
        self.retries.labels(alias).inc()

    def restarted(self, alias: str) -> None:
        """The alias's worker was restarted (crash, hang, swap or external restart)."""
        self.restarts.labels(alias).inc()

    def output(self, s: Stream, out: RequestOutput, now: float) -> None:
        """Account one RequestOutput of stream S received at NOW (monotonic)."""
        n = len(out.token_ids)
        alias = s.alias
        if out.prompt_tokens > s.prompt_tokens:
            delta = out.prompt_tokens - s.prompt_tokens
            cached = max(out.cached_tokens - s.cached_tokens, 0)
            s.prompt_tokens, s.cached_tokens = out.prompt_tokens, max(out.cached_tokens, s.cached_tokens)
            self.prompt_tokens.labels(alias).inc(delta)
            self.prefix_queries.labels(alias).inc(delta)
            self.prefix_hits.labels(alias).inc(cached)
            totals = self.prefix.setdefault(alias, PrefixTotals())
            totals.queries += delta
            totals.hits += cached
        if out.drafted:
            self.spec_drafted.labels(alias, out.drafter).inc(out.drafted)
            self.spec_accepted.labels(alias, out.drafter).inc(out.accepted)
        if n:
            tokens, itl = self._per_token(alias)
            tokens.inc(n)
            if s.first_token_at is None:
                s.first_token_at = now
                self.ttft.labels(alias).observe(now - s.submitted_at)
                self.queue.labels(alias).observe(out.queue_s)
            else:
                gap = (now - s.last_token_at) / n
                for _ in range(n):
                    itl.observe(gap)
            s.last_token_at = now
        if out.finish_reason is not None:
            self.e2e.labels(alias).observe(now - s.submitted_at)
            if out.error is not None or out.finish_reason == "error":
                self.errors.labels(alias, out.error_code or "internal_error").inc()
            else:
                self.success.labels(alias, out.finish_reason).inc()

    def _per_token(self, alias: str) -> tuple[Any, Any]:
        """The alias's generated-tokens counter and inter-token histogram (looked up once)."""
        got = self._token_series.get(alias)
        if got is None:
            got = self._token_series[alias] = (self.generation_tokens.labels(alias),
                                               self.itl.labels(alias))
        return got

    def ended(self, s: Stream, code: str, now: float) -> None:
        """Stream S ended without a finish from its worker: CODE is 'abort' or an error code."""
        self.e2e.labels(s.alias).observe(now - s.submitted_at)
        if code == "abort":
            self.success.labels(s.alias, "abort").inc()
        else:
            self.errors.labels(s.alias, code).inc()

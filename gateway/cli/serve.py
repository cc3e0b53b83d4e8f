"""`rapid-mlx serve`: start the gateway and the workers of its models."""

from __future__ import annotations

import sys
from typing import Any

import click

from gateway.aliases import load_aliases, user_alias_file
from gateway.anthropic.models import parse_model_map
from gateway.cli.common import OneLineError
from gateway.cli.gguf import gguf_folders
from gateway.cli.options import Size, edge_options, listed
from gateway.cli.serve_config import data_dir as prepared_data_dir
from gateway.cli.serve_config import group_args, served_models
from gateway.config import GatewayConfig
from gateway.plane.tenants import per_key
from protocol.messages import DEFAULT_MAX_TOKENS

DFLASH_REFUSAL = ("--enable-dflash: DFlash block-diffusion drafting is not built in rapid-mlx (its "
                  "drafts cannot be verified losslessly by the paged engine yet); use "
                  "--speculative ngram, draft or mtp for lossless speculative decoding")


@click.command()
@click.argument("models", nargs=-1)
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=8000, show_default=True, type=int)
@click.option("--served-model-name", "names", multiple=True, help="alias per MODEL, in order")
@click.option("--api-key", "api_keys", multiple=True, envvar="RAPID_MLX_API_KEYS",
              help="accept only these keys (default: any); each is a tenant: it sees only its "
              "own stored responses, and no requests, pids or paths in /v1/workers, /v1/health, "
              "/v1/models (the --admin-key does)")
@click.option("--tool-call-parser", default=None)
@click.option("--reasoning-parser", default=None)
@click.option("--aliases", "aliases_file", default=None, envvar="RAPID_MLX_ALIASES",
              help="a TOML file of extra or overriding aliases")
@click.option("--anthropic-model-map", "model_map", multiple=True,
              help="map client model names on /v1/messages to an alias: PATTERN=ALIAS (a glob, "
                   "e.g. 'claude-*=default'; ALIAS alone maps every unknown name); repeatable")
@click.option("--kv-cache-turboquant", type=click.Choice(["k8v4", "none"]), default="k8v4",
              show_default=True, help="KV pages: 8-bit keys + 4-bit values, or full precision")
@click.option("--kv-cache-memory", default="0.1", show_default=True,
              help="KV pool per worker: bytes (2GiB, 512MB) or a fraction of RAM")
@click.option("--disable-prefix-cache", is_flag=True, help="no radix-tree prefix sharing")
@click.option("--shared-prefix-cache", is_flag=True,
              help="with --api-key: tenants share one prefix cache (default: one per key), so a "
                   "tenant can tell from cached_tokens and time to first token whether another "
                   "sent the same prompt prefix")
@click.option("--speculative", type=click.Choice(["none", "ngram", "draft", "mtp"]),
              default="none", show_default=True,
              help="lossless speculative decoding: n-gram prompt lookup, a draft model, or the "
                   "checkpoint's MTP layers")
@click.option("--num-draft-tokens", default=None, type=click.IntRange(min=1),
              help="most draft tokens per row and step (adapted per row below it; default 8 "
                   "for ngram, 4 otherwise)")
@click.option("--draft-model", default=None,
              help="--speculative draft: the draft model (folder, repo id or alias)")
@click.option("--enable-dflash", is_flag=True,
              help="DFlash block-diffusion drafting: not built; the flag stops the start saying "
                   "why (use --speculative)")
@click.option("--audio-mode", is_flag=True,
              help="the served models are speech models (text-to-speech or speech-to-text): a "
                   "worker whose model is of another kind fails at start saying so")
@click.option("--compile-decode", type=click.Choice(["auto", "on", "off"]), default="auto",
              show_default=True,
              help="decode steps through mx.compile: where it measured faster (up to 8 rows of "
                   "a model of <= 32 MiB, 1 row above), "
                   "every decode batch it covers, or never")
@click.option("--max-batch", default=32, show_default=True, type=int)
@click.option("--prefill-budget", default=512, show_default=True, type=int,
              help="prompt tokens computed per engine step")
@click.option("--max-waiting", default=256, show_default=True, type=int)
@click.option("--context-length", default=0, type=int,
              help="every model's context in tokens (above the trained length: degraded)")
@click.option("--default-max-tokens", default=DEFAULT_MAX_TOKENS, show_default=True,
              type=click.IntRange(min=0),
              help="output cap of a request that sets none (its answer ends with finish_reason "
                   "length there); 0: the rest of the context")
@click.option("--worker-address", default="", help="bind workers here (default: private ipc)")
@click.option("--hang-timeout", default=30.0, show_default=True, type=float,
              help="seconds without progress, with work, before a worker is declared hung")
@click.option("--log-level", default="info", show_default=True)
@click.option("--replicas", default=1, show_default=True, type=click.IntRange(min=1),
              help="worker processes per alias; external workers of an alias join as more")
@click.option("--tensor-parallel", default=1, show_default=True, type=click.IntRange(min=1),
              help="shard each model over N ranks of one worker group (mlx.launch, ring backend)")
@click.option("--tp-hostfile", default=None, type=click.Path(dir_okay=False, exists=True),
              help="an mlx.launch hostfile: the group's ranks on these machines (rank 0 first)")
@click.option("--tp-port", default=0, type=int,
              help="the ring backend's first port (default: free loopback ports; hostfile: 32323)")
@click.option("--routing", type=click.Choice(["cache_aware", "least_loaded", "round_robin"]),
              default="cache_aware", show_default=True,
              help="how a request picks one of an alias's replicas")
@click.option("--no-spawn-workers", is_flag=True,
              help="start no workers: wait for `rapid-mlx worker --connect ADDR` to join")
@click.option("--shutdown-timeout", default=30.0, show_default=True, type=float,
              help="on SIGTERM, seconds running requests may take to finish")
@click.option("--swap-wait", default=30.0, show_default=True, type=float,
              help="seconds a request waits for a restarting or swapping worker")
@click.option("--swap-drain-timeout", default=30.0, show_default=True, type=float,
              help="on a hot swap, seconds running requests may take to finish")
@click.option("--max-start-crashes", default=5, show_default=True, type=int,
              help="crashes at start-up in a row before an alias is marked failed")
@click.option("--restart-backoff", default=0.5, show_default=True, type=float,
              help="first restart delay; doubles after each crash at start-up")
@click.option("--admin-key", default=None, envvar="RAPID_MLX_ADMIN_KEY",
              help="enable admin endpoints (hot swap) with this bearer key (default: disabled); "
              "with --api-key it also shows /v1/workers and /v1/health in full")
@click.option("--curve-dir", default=None, type=click.Path(file_okay=False),
              help="CURVE keys (see `rapid-mlx keys`): only listed workers may join")
@click.option("--worker-token-file", default=None, type=click.Path(dir_okay=False),
              help="external workers must send the token in this file (created if missing)")
@click.option("--insecure-worker-transport", is_flag=True,
              help="allow tcp:// workers without CURVE, and external workers without proof")
@click.option("--heartbeat-timeout", default=1.0, show_default=True, type=float,
              help="seconds a worker connection may leave a ping unanswered before an "
                   "external worker is declared gone")
@click.option("--data-dir", default=None, envvar="RAPID_MLX_DATA_DIR",
              help="where stored responses live (created 0700) [default: "
                   "$XDG_DATA_HOME/rapid-mlx or ~/.local/share/rapid-mlx]")
@click.option("--no-store", is_flag=True,
              help="store no responses: /v1/responses answers store false and refuses "
                   "previous_response_id")
@click.option("--responses-max-count", default=10000, show_default=True,
              type=click.IntRange(min=0), help="keep at most this many stored responses; over it "
                                              "the API key holding the most loses its oldest "
                                              "first (0: no bound)")
@click.option("--responses-max-age", default=30.0, show_default=True,
              type=click.FloatRange(min=0), help="days a stored response is kept (0: no bound)")
@click.option("--responses-max-bytes", default="1GiB", show_default=True, type=Size(),
              help="keep at most this many bytes stored (JSON and rows); over it the API key "
                   "holding the most loses its oldest first; a response larger on its own is "
                   "answered but not stored (0: no bound)")
@click.option("--responses-max-bytes-per-key", default="0", show_default=True, type=Size(),
              help="keep at most this many bytes stored of any one API key, its oldest dropped "
                   "first (0: no bound)")
@edge_options
def serve(models: tuple[str, ...], host: str, port: int, names: tuple[str, ...],
          api_keys: tuple[str, ...], tool_call_parser: str | None, reasoning_parser: str | None,
          aliases_file: str | None, kv_cache_turboquant: str, kv_cache_memory: str,
          disable_prefix_cache: bool, shared_prefix_cache: bool, speculative: str,
          num_draft_tokens: int | None, draft_model: str | None, enable_dflash: bool,
          audio_mode: bool, compile_decode: str,
          max_batch: int, prefill_budget: int, max_waiting: int,
          context_length: int, default_max_tokens: int, worker_address: str, hang_timeout: float, log_level: str,
          replicas: int, tensor_parallel: int, tp_hostfile: str | None, tp_port: int,
          routing: str,
          no_spawn_workers: bool,
          shutdown_timeout: float, swap_wait: float, swap_drain_timeout: float,
          max_start_crashes: int, restart_backoff: float, admin_key: str | None,
          curve_dir: str | None, worker_token_file: str | None, insecure_worker_transport: bool,
          heartbeat_timeout: float, model_map: tuple[str, ...], data_dir: str | None,
          no_store: bool, responses_max_count: int, responses_max_age: float,
          responses_max_bytes: int, responses_max_bytes_per_key: int, **edge: Any) -> None:
    """Serve MODELS (aliases, Hugging Face repo ids, local folders or .gguf files); none: the
    embedded demo."""
    if enable_dflash:
        raise OneLineError(DFLASH_REFUSAL)
    if no_spawn_workers and not worker_address:
        raise click.UsageError("--no-spawn-workers needs --worker-address (where workers connect)")

    worker_args = ["--max-batch", str(max_batch), "--prefill-budget", str(prefill_budget),
                   "--max-waiting", str(max_waiting), "--log-level", log_level.upper(),
                   "--kv-cache-turboquant", kv_cache_turboquant,
                   "--kv-cache-memory", kv_cache_memory, "--compile-decode", compile_decode,
                   "--default-max-tokens", str(default_max_tokens)]
    if disable_prefix_cache:
        worker_args.append("--disable-prefix-cache")
    if audio_mode:
        worker_args.append("--audio-mode")
    if context_length:
        worker_args += ["--context-length", str(context_length)]
    worker_args += group_args(tensor_parallel, tp_hostfile, tp_port)
    aliases = load_aliases(user_alias_file(aliases_file))
    if speculative == "draft" and not draft_model:
        raise click.UsageError("--speculative draft needs --draft-model PATH|ALIAS")
    if speculative != "none":
        worker_args += ["--speculative", speculative]
        if num_draft_tokens is not None:  # else the worker's default for the drafter
            worker_args += ["--num-draft-tokens", str(num_draft_tokens)]
        if draft_model:
            entry = aliases.get(draft_model)
            worker_args += ["--draft-model", entry.repo if entry is not None else draft_model]
    served = served_models(gguf_folders(models), names, tool_call_parser, reasoning_parser, aliases_file)
    try:
        anthropic_map = parse_model_map(list(model_map), {m.alias for m in served})
    except ValueError as exc:
        raise click.UsageError(f"--anthropic-model-map {exc}") from None
    config = GatewayConfig(
        served=served, anthropic_model_map=anthropic_map,
        host=host, port=port,
        worker_address=worker_address, worker_args=worker_args,
        api_keys=[k for k in api_keys if k], shared_prefix_cache=shared_prefix_cache,
        hang_timeout=hang_timeout, log_level=log_level,
        spawn_workers=not no_spawn_workers, replicas=replicas, routing=routing,
        shutdown_timeout=shutdown_timeout,
        swap_wait=swap_wait, swap_drain_timeout=swap_drain_timeout,
        max_start_crashes=max_start_crashes, restart_backoff=restart_backoff,
        admin_key=admin_key or None, curve_dir=curve_dir, worker_token_file=worker_token_file,
        insecure_worker_transport=insecure_worker_transport, heartbeat_timeout=heartbeat_timeout,
        allowed_hosts=listed(edge["allowed_hosts"]),
        cors_allow_origins=listed(edge["cors_allow_origins"]),
        allow_unauthenticated=edge["allow_unauthenticated"],
        public_metrics=edge["public_metrics"], public_health=edge["public_health"],
        public_docs=edge["public_docs"], swap_allow_paths=list(edge["swap_allow_paths"]),
        swap_allow_repos=edge["swap_allow_repos"], header_timeout=edge["header_timeout"],
        max_connections=edge["max_connections"], max_body_memory=edge["max_body_memory"],
        max_requests_per_key=per_key(edge["max_requests_per_key"], max_waiting,
                                     keyed=any(api_keys)),
        allow_image_urls=edge["allow_image_urls"],
        alias_models={name: entry.repo for name, entry in aliases.items()},
        data_dir=None if no_store else prepared_data_dir(data_dir), store_responses=not no_store,
        responses_max_count=responses_max_count, responses_max_age_days=responses_max_age,
        responses_max_bytes=responses_max_bytes,
        responses_max_bytes_per_key=responses_max_bytes_per_key)
    refusal = config.exposure_error() or config.worker_plane_problem()
    if refusal:
        raise click.ClickException(refusal)
    try:
        config.worker_token()  # create the token file now, or say why it cannot be read
    except (OSError, ValueError) as exc:
        raise click.ClickException(f"--worker-token-file: {exc}") from exc
    from gateway.server import run

    try:
        run(config)
    except KeyboardInterrupt:  # interrupted before the server could take over the signals
        sys.exit(130)

"""`python -m worker`: load one model and serve it to a gateway over ZeroMQ."""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import signal
import sys
import uuid
from typing import Any

from protocol.messages import DEFAULT_MAX_TOKENS
from worker.cpu.blas import apply_blas_policy, reexec_with_openblas
from worker.model.rlimit import import_mlx_lm


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """Command-line options of a worker process."""
    p = argparse.ArgumentParser(prog="python -m worker", description=__doc__)
    p.add_argument("--alias", required=True, help="the model name clients use")
    p.add_argument("--model", required=True, help="local folder or Hugging Face repo id")
    p.add_argument("--revision", default=None)
    p.add_argument("--connect", required=True, help="gateway address (ipc://... or tcp://...)")
    p.add_argument("--boot-id", default=None)
    p.add_argument("--parent-pid", type=int, default=None)
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--prefill-budget", type=int, default=512)
    p.add_argument("--max-waiting", type=int, default=256)
    p.add_argument("--context-length", type=int, default=0, help="the model's context (tokens)")
    p.add_argument("--default-max-tokens", type=int, default=DEFAULT_MAX_TOKENS,
                   help="output cap of a request that sets none (0: the rest of the context)")
    p.add_argument("--kv-cache-turboquant", choices=["k8v4", "none"], default="k8v4",
                   help="KV page format: 8-bit keys + 4-bit values, or full precision")
    p.add_argument("--kv-cache-memory", default="0.1",
                   help="KV pool size: bytes (2GiB, 512MB) or a fraction of RAM (0.1)")
    p.add_argument("--kv-page-size", type=int, default=16)
    p.add_argument("--kv-group-size", type=int, default=32, choices=[32, 64, 128])
    p.add_argument("--disable-prefix-cache", action="store_true")
    p.add_argument("--speculative", choices=["none", "ngram", "draft", "mtp"], default="none",
                   help="speculative decoding drafter (lossless; off by default)")
    p.add_argument("--num-draft-tokens", type=int, default=None,
                   help="most draft tokens verified per row and step (adaptive below it; "
                        "default 8 for ngram, 4 otherwise)")
    p.add_argument("--draft-model", default=None, help="--speculative draft: its model folder")
    p.add_argument("--compile-decode", choices=["auto", "on", "off"], default="auto",
                   help="decode steps through mx.compile: where it measured faster (auto), "
                        "every decode batch it covers (on), or never (off)")
    p.add_argument("--audio-mode", action="store_true",
                   help="fail at start unless the model is a text-to-speech or speech-to-text one")
    p.add_argument("--log-level", default="INFO")
    p.add_argument("--tensor-parallel", type=int, default=1,
                   help="this process is one rank of an mlx.launch group of N (worker/tp)")
    p.add_argument("--tp-hostfile", default=None, help="read by worker.tp.launch")
    p.add_argument("--tp-port", type=int, default=0, help="read by worker.tp.launch")
    p.add_argument("--curve-server-key", default=None,
                   help="the gateway's public key file (server.key): turns CURVE on")
    p.add_argument("--curve-secret-file", default=None,
                   help="this worker's key pair file (NAME.key_secret)")
    p.add_argument("--worker-token-file", default=None,
                   help="a file holding the gateway's --worker-token-file token (external workers)")
    return p.parse_args(argv)


def _raise_interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def _give_up(sock: Any, alias: str, boot_id: str, reason: str, code: int) -> int:
    """Tell the gateway why this worker exits before serving, close the socket, return CODE."""
    import zmq

    from protocol import messages as m

    sock.setsockopt(zmq.SNDTIMEO, 2000)
    with contextlib.suppress(zmq.ZMQError):
        sock.send(m.encode(m.Dead(alias=alias, boot_id=boot_id, reason=reason)))
    sock.close()
    sock.context.term()
    return code


def _load_failed(exc: Exception, args: argparse.Namespace, sock: Any, boot_id: str) -> int:
    """Log a load failure that a restart may cure, tell the gateway, return exit code 3."""
    why = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0] if str(exc).strip() else ''}"
    logging.error("could not load %s: %s%s", args.model, why,
                  "" if args.log_level.upper() == "DEBUG"
                  else " (--log-level debug shows the traceback)")
    logging.debug("details", exc_info=True)
    return _give_up(sock, args.alias, boot_id, f"load failed: {why}", 3)


def _serve(loop: Any, args: argparse.Namespace, sock: Any, boot_id: str, what: str,
           leader: Any = None) -> int:
    """Run LOOP until it stops, say Dead with the reason, close the socket; 0 on a clean stop."""
    import zmq

    from protocol import messages as m

    try:
        loop.run()
        reason = loop.stop_reason
    except KeyboardInterrupt:
        reason = "signal"
    except Exception as exc:  # report, then die: the supervisor restarts us
        logging.exception("%s failure", what)
        reason = f"{what} failure: {exc}"
    if leader is not None:  # rank 0 of a tensor-parallel group: the other ranks stop too
        leader.stop(reason)
    with contextlib.suppress(zmq.ZMQError):
        sock.send(m.encode(m.Dead(alias=args.alias, boot_id=boot_id, reason=reason)), zmq.NOBLOCK)
    sock.close()
    sock.context.term()
    return 0 if reason in ("shutdown", "signal", "drained after SIGTERM") else 1


def fit_tokenizer(tokenizer: Any, context_length: int) -> None:
    """Tell the tokenizer the served context: transformers otherwise warns of "indexing errors"
    for every prompt longer than the checkpoint's own limit, which the served context may pass
    (prompts over the context are refused with their own message, so that warning is marked
    as given)."""
    inner = getattr(tokenizer, "_tokenizer", tokenizer)
    with contextlib.suppress(AttributeError, TypeError, ValueError):
        inner.model_max_length = max(int(getattr(inner, "model_max_length", 0) or 0),
                                     context_length)
    warned = getattr(inner, "deprecation_warnings", None)  # transformers' warn-once record
    if isinstance(warned, dict):
        warned["sequence-length-is-longer-than-the-specified-maximum"] = True


def pulse_beside(sock: Any, args: argparse.Namespace, boot_id: str) -> Any:
    """The pulse thread of the worker whose loop socket is SOCK (same gateway, same keys)."""
    import zmq

    from protocol import messages as m
    from worker.serve.curve import configure_client
    from worker.serve.pulse import Pulse

    return Pulse(sock.context, args.connect, m.pulse_id(sock.getsockopt(zmq.ROUTING_ID)), boot_id,
                 lambda s: configure_client(s, args.curve_server_key, args.curve_secret_file))


def model_kind(model: str, revision: str | None) -> str:
    """The worker kind MODEL's folder needs (downloading it first when it is a repo id)."""
    from worker.kinds.detect import detect_kind
    from worker.model.fetch import resolve
    from worker.model.load import read_config

    path = resolve(model, revision)
    return detect_kind(path, read_config(model, path))


def check_audio_mode(model: str, kind: str) -> None:
    """--audio-mode: CannotLoad (one line) unless KIND is a speech kind."""
    from worker.model.fetch import CannotLoad

    if kind not in ("speech", "transcribe"):
        what = {"generate": "a text-generation", "embed": "an embedding"}.get(kind, kind)
        raise CannotLoad(model, f"--audio-mode serves text-to-speech and speech-to-text models, "
                         f"and it is {what} model", "serve it without --audio-mode")


def serve_kind(kind: str, args: argparse.Namespace, sock: Any, boot_id: str, secret: str) -> int:
    """Load and serve an embedding, speech-to-text or text-to-speech model until shutdown."""

    from worker.kinds.registry import load_runner
    from worker.model.fetch import EXIT_CANNOT_LOAD, CannotLoad, resolve
    from worker.model.load import read_config
    from worker.serve.loop import WorkerLoop

    try:
        path = resolve(args.model, args.revision)
        runner = load_runner(kind, args.model, path, read_config(args.model, path), args)
    except KeyboardInterrupt:
        return _give_up(sock, args.alias, boot_id, "signal", 0)
    except CannotLoad as exc:
        logging.log(logging.DEBUG if args.parent_pid else logging.ERROR, "%s", exc)
        return _give_up(sock, args.alias, boot_id, str(exc), EXIT_CANNOT_LOAD)
    except Exception as exc:  # maybe transient: the supervisor restarts us with backoff
        return _load_failed(exc, args, sock, boot_id)
    from worker.model.fingerprint import fingerprint

    runner.facts.revision = fingerprint(path)
    loop = WorkerLoop(runner, sock, args.alias, boot_id, args.parent_pid, secret=secret,
                      pulse=pulse_beside(sock, args, boot_id))
    logging.info("serving %s (%s, %s) pid %d boot %s", args.alias, args.model, kind,
                 os.getpid(), boot_id)
    return _serve(loop, args, sock, boot_id, "worker")


def main(argv: list[str] | None = None) -> int:
    """Run a worker until shutdown; exit code 0 on a clean stop."""
    reexec_with_openblas()
    import_mlx_lm()  # before anything else imports it: it would change the open-file limits
    signal.signal(signal.SIGTERM, _raise_interrupt)
    args = parse_args(argv)
    link = None
    if args.tensor_parallel > 1:  # one rank of an mlx.launch group (worker/tp)
        from worker.tp.setup import join_group

        link = join_group(args)
    who = f"{args.alias}" + (f" rank {link.rank}" if link is not None else "")
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s worker[{who}] %(levelname)s %(message)s")
    from worker.serve.lifetime import die_with_parent

    die_with_parent(args.parent_pid)
    if link is not None and link.rank != 0:
        from worker.tp.follower import run_follower

        return run_follower(args, link)
    import zmq

    from protocol import messages as m
    from worker.engine.attention import install as install_paged_attention
    from worker.engine.compile_mode import mode_in_force
    from worker.engine.core import Engine, model_dtype
    from worker.kv.setup import UnsupportedModel, plan_kv
    from worker.model.fetch import EXIT_CANNOT_LOAD, CannotLoad
    from worker.model.fingerprint import fingerprint
    from worker.model.load import load_model
    from worker.serve.loop import WorkerLoop
    from worker.serve.text_runner import TextRunner
    from worker.spec.registry import build_speculator

    boot_id = args.boot_id or uuid.uuid4().hex
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    from worker.serve.curve import configure_client, exit_when_refused, worker_secret

    secret = worker_secret(args.worker_token_file)
    sock.setsockopt(zmq.ROUTING_ID, m.routing_id(args.alias, boot_id, secret))
    sock.setsockopt(zmq.LINGER, 1000)
    configure_client(sock, args.curve_server_key, args.curve_secret_file)
    exit_when_refused(sock)
    sock.connect(args.connect)
    try:
        kind = model_kind(args.model, args.revision)
        if args.audio_mode:
            check_audio_mode(args.model, kind)
        if kind != "generate":
            return serve_kind(kind, args, sock, boot_id, secret)
        loaded = load_model(args.model, args.revision)
        apply_blas_policy(loaded.model)
        if link is not None:
            from worker.tp.shard import shard_model

            shard_model(loaded.model, link)
        loaded.facts.revision = fingerprint(loaded.path)
        context_length = loaded.facts.context_length
        if args.context_length:
            if args.context_length > context_length:
                logging.warning("--context-length %d exceeds %s's trained %d: longer prompts run, "
                            "with degraded output", args.context_length, args.model,
                            context_length)
            context_length = args.context_length
            loaded.facts.context_length = context_length
        fit_tokenizer(loaded.tokenizer, context_length)
        plan = plan_kv(loaded.model, model_dtype(loaded.model), kind=args.kv_cache_turboquant,
                       memory=args.kv_cache_memory, page_size=args.kv_page_size,
                       group_size=args.kv_group_size, max_batch=args.max_batch,
                       context_length=context_length, prefill_budget=args.prefill_budget,
                       window_group=link is None)
        if link is not None:
            from worker.tp.shard import share_store

            plan = share_store(plan, link)
        spec = None
        if link is not None and args.speculative != "none":
            logging.warning("--speculative is off in a tensor-parallel group (not supported yet)")
        else:
            spec = build_speculator(args.speculative, loaded, num_draft=args.num_draft_tokens,
                                    draft_model=args.draft_model, max_batch=args.max_batch,
                                    context_length=context_length,
                                    compile_draft=mode_in_force(args.compile_decode) != "off")
        loaded.facts.speculative = spec.name if spec is not None else ""
    except KeyboardInterrupt:  # stopped while loading: nothing to report
        return _give_up(sock, args.alias, boot_id, "signal", 0)
    except (CannotLoad, UnsupportedModel) as exc:  # a restart would not help
        line = str(exc) if isinstance(exc, CannotLoad) else (
            f"cannot serve '{args.model}': {exc} (see 'rapid-mlx models')")
        # a gateway that spawned us prints the line it gets in our Dead; alone, we print it
        logging.log(logging.DEBUG if args.parent_pid else logging.ERROR, "%s", line)
        logging.debug("details", exc_info=True)
        return _give_up(sock, args.alias, boot_id, line, EXIT_CANNOT_LOAD)
    except Exception as exc:  # maybe transient: the supervisor restarts us with backoff
        return _load_failed(exc, args, sock, boot_id)
    logging.info("KV cache: %s, %d pages of %d tokens (%s)", plan.kind, plan.store.num_pages,
                 args.kv_page_size, plan.reason)
    install_paged_attention()
    engine = Engine(loaded.model, loaded.tokenizer, plan.store, context_length=context_length,
                    max_batch=args.max_batch, prefill_budget=args.prefill_budget,
                    max_waiting=args.max_waiting, prefix_cache=not args.disable_prefix_cache,
                    spec=spec, compile_decode=args.compile_decode)
    engine.kv_note = plan.reason
    if link is None:  # a tensor-parallel group's ranks must run the same forwards
        from worker.serve.warmup import warm_up

        warm_up(engine)
    leader = None
    if link is not None:
        from worker.tp.leader import lead

        leader = lead(engine, link)
    runner = TextRunner(engine, loaded, default_max_tokens=args.default_max_tokens)
    # a tensor-parallel group's rank 0 waits in collectives on its peers, spinning: its own
    # pulse and CPU time cannot tell a stopped peer from a slow step, so the gateway keeps the
    # rule that steps must advance every --hang-timeout (no pulse)
    pulse = pulse_beside(sock, args, boot_id) if link is None else None
    loop = WorkerLoop(runner, sock, args.alias, boot_id, args.parent_pid, secret=secret,
                      pulse=pulse)
    logging.info("serving %s (%s) pid %d boot %s", args.alias, args.model, os.getpid(), boot_id)
    return _serve(loop, args, sock, boot_id, "engine", leader)


def _main_with_status() -> int:
    """main(), leaving the exit code for a tensor-parallel group's launcher."""
    from worker.tp.status import write_status

    try:
        code = main()
    except KeyboardInterrupt:  # a signal before the worker could handle it: stop quietly
        code = 0
    write_status(code)
    return code


if __name__ == "__main__":
    sys.exit(_main_with_status())

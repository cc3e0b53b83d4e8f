"""`python -m worker`: load one model and serve it to a gateway over ZeroMQ."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import uuid

from worker.blas import reexec_with_openblas


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
    p.add_argument("--context-length", type=int, default=0, help="cap the model's context")
    p.add_argument("--log-level", default="INFO")
    return p.parse_args(argv)


def _raise_interrupt(*_: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run a worker until shutdown; exit code 0 on a clean stop."""
    reexec_with_openblas()
    args = parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(),
                        format=f"%(asctime)s worker[{args.alias}] %(levelname)s %(message)s")
    from worker.lifetime import die_with_parent

    die_with_parent(args.parent_pid)
    import zmq

    from protocol import messages as m
    from worker.engine import Engine
    from worker.loader import load_model
    from worker.loop import WorkerLoop

    boot_id = args.boot_id or uuid.uuid4().hex
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.ROUTING_ID, f"{args.alias}:{boot_id}".encode())
    sock.setsockopt(zmq.LINGER, 1000)
    sock.connect(args.connect)
    signal.signal(signal.SIGTERM, _raise_interrupt)
    try:
        loaded = load_model(args.model, args.revision)
    except Exception as exc:
        logging.exception("could not load %s", args.model)
        sock.send(m.encode(m.Dead(alias=args.alias, boot_id=boot_id, reason=f"load failed: {exc}")))
        sock.close()
        ctx.term()
        return 3
    context_length = loaded.facts.context_length
    if args.context_length:
        context_length = min(context_length, args.context_length)
        loaded.facts.context_length = context_length
    engine = Engine(loaded.model, loaded.tokenizer, context_length=context_length,
                    max_batch=args.max_batch, prefill_budget=args.prefill_budget,
                    max_waiting=args.max_waiting)
    loop = WorkerLoop(engine, loaded, sock, args.alias, boot_id, args.parent_pid)
    logging.info("serving %s (%s) pid %d boot %s", args.alias, args.model, os.getpid(), boot_id)
    try:
        loop.run()
        reason = "shutdown"
    except KeyboardInterrupt:
        reason = "signal"
    except Exception as exc:  # report, then die: the supervisor restarts us
        logging.exception("engine failure")
        reason = f"engine failure: {exc}"
    try:
        sock.send(m.encode(m.Dead(alias=args.alias, boot_id=boot_id, reason=reason)), zmq.NOBLOCK)
    except zmq.ZMQError:
        pass
    sock.close()
    ctx.term()
    return 0 if reason in ("shutdown", "signal") else 1


if __name__ == "__main__":
    sys.exit(main())

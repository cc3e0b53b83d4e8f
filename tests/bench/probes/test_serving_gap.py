"""bench.probes.serving_gap's books: the scheduler's per-thread seconds and the per-concurrency table."""

from __future__ import annotations

import subprocess
import sys
import time

from bench.probes.serving_gap import report, thread_sched
from bench.servers import Server


def test_thread_sched_reads_a_busy_process_on_cpu_seconds() -> None:
    # the main thread's own CPU time (a preloaded OpenBLAS's threads spin at start-up and count in
    # process_time, so the main thread alone could stay under 0.3 s: it did, under load)
    busy = "import time\nt = time.thread_time()\nwhile time.thread_time() - t < 0.3: pass\n" \
           "time.sleep(30)"
    proc = subprocess.Popen([sys.executable, "-c", busy])
    try:
        s = Server("peer", "mlx_lm", "unused")
        s.proc = proc
        deadline = time.monotonic() + 20
        books = thread_sched(s)
        while books.get("server/main", (0.0, 0.0))[0] < 0.3 and time.monotonic() < deadline:
            time.sleep(0.1)
            books = thread_sched(s)
        run, wait = books["server/main"]
        assert 0.3 <= run < 20 and wait >= 0
    finally:
        proc.kill()
        proc.wait()


def test_report_prints_medians_and_per_round_ratios(capsys) -> None:  # type: ignore[no-untyped-def]
    def row(ms: float) -> dict[str, object]:
        return {"tok_s": 100.0, "wall_ms_step": ms, "rows_step": 8.0, "sync_steps": 4.0,
                "sync_share": 0.05, "overlapped_ms_step": ms * 0.95,
                "threads": {"worker/main": (10.0, 5.0)}}

    report("qwen3", 8, {"ours": [row(40.0), row(60.0), row(50.0)]}, [40.0, 50.0, 50.0])
    out = capsys.readouterr().out
    assert "in-engine step 50.0 ms wall" in out
    assert "| ours | 100 | 50.0 | 8.00 | 4 | 5.0% | 47.5 | 1.00 (1.00, 1.20, 1.00) |" in out
    assert "worker/main 10% on CPU / 5% waiting" in out

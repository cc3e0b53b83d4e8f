"""Verify forwards (a row's last token and its drafts) through compiled functions.

A verify batch is a decode batch with a few positions per row (n = k + 1): the same compiled
machinery applies (``CompiledDecode``: page arrays and every per-step array as inputs, one
function per shape key, here also per n). On a dispatch-bound model the plain verify forward
cost 1.6x a compiled decode step, which took speculation's gain (measured).
"""

from __future__ import annotations

from worker.engine.compiled_decode import CompiledDecode
from worker.kv.paged_batch import PagedBatch

# rows up to which verify forwards (and fused draft steps) compile: at 8 rows on the demo model
# the compiled ones measured slower than plain (8 requests at once: 0.86x vs 0.95x plain decoding)
MAX_VERIFY_ROWS = 2


class CompiledVerify(CompiledDecode):
    """Verify forwards of up to ``max_rows`` rows, full-precision pages or a dense K8V4 working set."""

    def takes(self, rows: int) -> bool:
        """True when a verify (or fused draft) batch of ROWS rows may compile."""
        return rows <= min(self.max_rows, MAX_VERIFY_ROWS)

    def fits(self, batch: PagedBatch) -> bool:
        """True for a multi-position batch of few rows whose K8V4 reads stay in the working set."""
        return batch.n > 1 and self.takes(len(batch.lengths)) and (
            not batch.quantized or (batch.work is not None and batch.work.dense))

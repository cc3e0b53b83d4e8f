"""CPU-only paths: the optimized BLAS, native kernels and the few-row products built on them."""

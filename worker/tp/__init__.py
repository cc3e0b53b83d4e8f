"""Tensor-parallel worker groups: one model sharded over the ranks of an mlx.distributed group."""

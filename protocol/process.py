"""What the gateway and its worker processes agree on besides the wire messages: exit codes,
environment variables and model references."""

from __future__ import annotations

# A worker exits with this code when its model cannot be loaded for a reason a restart will not
# fix (EX_CONFIG of sysexits.h); `rapid-mlx serve` exits with it too when no alias could load.
EXIT_CANNOT_LOAD = 78

# The folder of a tensor-parallel group (its hostfile and plan socket): made by the gateway's
# supervisor (gateway/plane/tp_group.py) or by worker/tp/launch.py, read by its ranks.
TP_DIR_ENV = "RAPID_MLX_TP_DIR"

EMBEDDED_PREFIX = "embedded://"  # a model reference to a demo model that ships with rapid-mlx

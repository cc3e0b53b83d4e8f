"""The worker plane: the hub and its socket, peers and events, the watchdog, the supervisor, drain and metrics."""

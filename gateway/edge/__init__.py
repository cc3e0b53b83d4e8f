"""The HTTP edge: hosts, CORS, auth, the h11 protocol, request limits, JSON guards and the error envelope."""

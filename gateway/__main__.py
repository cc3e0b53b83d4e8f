"""`python -m gateway`: the rapid-mlx command line."""

from gateway.cli import main

main()

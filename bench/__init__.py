"""Benchmarks (not tests): `python -m bench.run` prints the figures."""

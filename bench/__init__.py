"""Benchmarks: `make bench` (or `python -m bench [name ...]`) prints tables."""

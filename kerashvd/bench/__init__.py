"""Benchmarks that print nccl-tests-style tables (run ``python -m kerashvd.bench --help``)."""

"""Benchmark tests: the `slow` marker (they start the benchmarks' own worker processes)."""


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: starts benchmark worker processes (seconds, not milliseconds)")

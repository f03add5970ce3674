"""fluxfs.server: an embedded GCS-compatible server (JSON API v1 and XML API) for tests, demos and
benchmarks, with a cloud profile (latency, bandwidth, rate limit) and seeded fault injection."""
from .handle import ServerHandle, run
from .synthetic import synthetic_bytes

__all__ = ["run", "ServerHandle", "synthetic_bytes"]

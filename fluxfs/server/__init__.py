"""fluxfs.server: an embedded GCS-compatible server (JSON API v1, batch and XML API incl. multipart
upload) for tests, demos, benchmarks and offline development, with a cloud profile (latency,
bandwidth, rate limit), seeded fault injection and optional persistence (``root=``).

    from fluxfs.server import run, synthetic_bytes
    with run() as srv:                      # in-process; run(in_process=False) for a subprocess
        srv.generate("bucket", 1_000_000)   # synthetic objects, content = synthetic_bytes(name, size, seed)
        srv.configure(profile="cloud", fail_rate=0.01, fail_ops={"read"})
        ... use srv.url as endpoint_url / STORAGE_EMULATOR_HOST ...

The same URL's host:port also answers the gRPC a zonal (Rapid) bucket needs (``BidiReadObject``, appendable
``BidiWriteObject``, ``GetStorageLayout``, folders; plaintext, see ``fluxfs/server/grpc/``)::

    AsyncGrpcClient(credentials=AnonymousCredentials(),
                    client_options=ClientOptions(api_endpoint=srv.url.split("://")[1]))

Command line: ``python -m fluxfs.server --port 0`` or ``fluxfs serve`` (URL on the first stdout line).
"""
from .handle import ServerHandle, run
from .synthetic import synthetic_bytes

__all__ = ["run", "ServerHandle", "synthetic_bytes"]

"""``run()`` and ``ServerHandle``: start the server in-process (a daemon thread with its own event
loop) or as a subprocess, and drive it through its /_fluxfs/ control endpoints."""
from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from typing import Any, Dict, List, Optional, Tuple, Union
from urllib.parse import urlencode

# Never route 127.0.0.1 control calls through an http_proxy from the environment.
_opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerHandle:
    """A running server: its URL and the control API (works alike in-process and for a subprocess)."""

    def __init__(self, url: str, closer=None, token: Optional[str] = None):
        self.url = url
        self._closer = closer
        # Sent on control calls: the server wants it there too once it requires one. configure()
        # keeps it in step with the require_token the server has.
        self.token = token

    def _call(self, method: str, cmd: str, body: Optional[Dict[str, Any]] = None, query: str = "") -> Any:
        data = json.dumps(body).encode() if body is not None else None
        headers = {"Content-Type": "application/json"}
        if self.token:
            headers["Authorization"] = "Bearer " + self.token
        req = urllib.request.Request(f"{self.url}/_fluxfs/{cmd}{'?' + query if query else ''}", data=data,
                                     method=method, headers=headers)
        try:
            with _opener.open(req, timeout=600) as r:
                return json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                msg = json.loads(e.read())["error"]["message"]
            except Exception:
                msg = str(e)
            raise (KeyError if e.code == 404 else ValueError)(msg) from None

    def create_bucket(self, name: str) -> None:
        """Create a bucket; no error if it exists."""
        self._call("POST", "bucket", {"name": name})

    def generate(self, bucket: str, count: int, size: Union[int, Tuple[int, int]] = 1024, prefix: str = "",
                 seed: int = 0) -> int:
        """Create ``count`` synthetic objects ``{prefix}{i:08d}`` (content: ``synthetic_bytes(name, size, seed)``)."""
        return self._call("POST", "generate", {"bucket": bucket, "count": count,
                                               "size": list(size) if isinstance(size, tuple) else size,
                                               "prefix": prefix, "seed": seed})["count"]

    def configure(self, **settings: Any) -> Dict[str, Any]:
        """Partial update of the profile/fault settings; returns the settings now in force."""
        for k in ("fail_ops", "deny_ops", "fail_codes"):
            if isinstance(settings.get(k), (set, frozenset, tuple)):
                settings[k] = sorted(settings[k])
        out = self._call("POST", "configure", settings)
        if "require_token" in settings or "profile" in settings:  # a profile resets every setting
            self.token = settings.get("require_token") or None
        return out

    def stats(self) -> Dict[str, Any]:
        """Requests and faults per op, requests being served and peak concurrency per op, bytes in/out,
        index keys scanned."""
        return self._call("GET", "stats")

    def reset_stats(self) -> None:
        """Zero the counters that stats() reports."""
        self._call("POST", "reset_stats")

    def list_names(self, bucket: str, prefix: str = "") -> List[str]:
        return self._call("GET", "names", query=urlencode({"bucket": bucket, "prefix": prefix}))

    def multipart_uploads(self, bucket: str) -> List[Dict[str, Any]]:
        return self._call("GET", "uploads", query=urlencode({"bucket": bucket}))

    def forget_sessions(self, bucket: str) -> List[str]:
        """Drop the resumable sessions into `bucket` as a restart without a root would; the names they were for."""
        return self._call("POST", "forget_sessions", {"bucket": bucket})

    def backdate(self, bucket: str, name: str, seconds: float) -> None:
        """Move the live object's timeCreated and updated `seconds` into the past, as if written then."""
        self._call("POST", "backdate", {"bucket": bucket, "name": name, "seconds": seconds})

    def close(self) -> None:
        if self._closer is not None:
            closer, self._closer = self._closer, None
            closer()

    def __enter__(self) -> "ServerHandle":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"ServerHandle({self.url!r})"


def _start_in_process(host: str, port: int, root: Optional[str], settings: Dict[str, Any]) -> ServerHandle:
    from .app import Server
    from .listen import Listening

    srv = Server(root, **settings)  # validates settings in the caller's thread
    loop = asyncio.new_event_loop()
    started = threading.Event()
    box: Dict[str, Any] = {}

    async def start():
        box["listening"] = await Listening.start(srv, host, port)
        box["port"] = box["listening"].port

    def main():
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(start())
        except BaseException as e:  # e.g. port in use: report to the caller
            box["error"] = e
            started.set()
            return
        started.set()
        loop.run_forever()
        loop.run_until_complete(box["listening"].close())
        loop.close()

    t = threading.Thread(target=main, name="fluxfs-server", daemon=True)
    t.start()
    started.wait()
    if "error" in box:
        raise box["error"]

    def closer():
        loop.call_soon_threadsafe(loop.stop)
        t.join(timeout=10)

    h = ServerHandle(f"http://{url_host(host)}:{box['port']}", closer)
    h.server = srv  # in-process only: direct access for debugging
    h.listening = box["listening"]  # in-process only: the port's HTTP and gRPC sides (listen.Listening)
    return h


def url_host(host: str) -> str:
    """``host`` as it goes into a URL (IPv6 addresses in brackets)."""
    return f"[{host}]" if ":" in host else host


def _start_subprocess(host: str, port: int, root: Optional[str], profile: str,
                      settings: Dict[str, Any]) -> ServerHandle:
    cmd = [sys.executable, "-m", "fluxfs.server", "--host", host, "--port", str(port), "--profile", profile,
           "--parent-pid", str(os.getpid())]
    if root:
        cmd += ["--root", str(root)]
    env = dict(os.environ)
    # The child must import this same fluxfs even when it is not installed (e.g. run from a checkout).
    pkg_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = pkg_parent + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, env=env)
    line = proc.stdout.readline().decode().strip()
    if not line.startswith("http"):
        proc.kill()
        proc.wait()
        raise RuntimeError(f"fluxfs server subprocess did not start (exit {proc.poll()}, said {line!r})")

    def closer():
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()

    h = ServerHandle(line, closer)
    h.process = proc
    if settings:
        try:
            h.configure(**settings)
        except BaseException:
            h.close()
            raise
    return h


def run(host: str = "127.0.0.1", port: int = 0, root: Optional[str] = None, profile: str = "local",
        in_process: bool = True, **settings: Any) -> ServerHandle:
    """Start a server; use as a context manager (``with run() as srv: srv.url``) or call ``close()``."""
    if in_process:
        return _start_in_process(host, port, root, dict(settings, profile=profile))
    return _start_subprocess(host, port, root, profile, settings)

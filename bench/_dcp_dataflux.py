"""The Dataflux contender of `bench dcp`, run by the Dataflux environment's python (google-cloud-storage<3).

usage: python _dcp_dataflux.py ENDPOINT BUCKET NAME BYTES TENSOR_MIB
Saves and loads the same state as bench/dcp.py with GCSDistributedWriter/Reader, checks it, and
prints one JSON line: {"save_s", "load_s", "save_cpu_s", "load_cpu_s"}.
"""
from __future__ import annotations

import json
import resource
import sys
import time
import warnings
from pathlib import Path


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> int:
    endpoint, bucket, name, nbytes, tensor_mib = sys.argv[1:6]
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from bench.dcp import make_state  # same tensors, same seed as the other contenders

    import torch
    import torch.distributed.checkpoint as dcp
    from dataflux_pytorch.lightning import GCSDistributedReader, GCSDistributedWriter
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    warnings.filterwarnings("ignore")
    client = storage.Client(project="bench", credentials=AnonymousCredentials(),
                            client_options={"api_endpoint": endpoint})
    state = make_state(int(nbytes), int(tensor_mib) * 2**20)
    url = f"gs://{bucket}/{name}"
    t0, c0 = time.perf_counter(), _cpu()
    dcp.save(state, storage_writer=GCSDistributedWriter(url, project_name="bench", storage_client=client))
    t1, c1 = time.perf_counter(), _cpu()
    target = {k: torch.empty_like(v) if isinstance(v, torch.Tensor) else 0 for k, v in state.items()}
    t2, c2 = time.perf_counter(), _cpu()
    dcp.load(target, storage_reader=GCSDistributedReader(url, project_name="bench", storage_client=client))
    t3, c3 = time.perf_counter(), _cpu()
    for k, v in state.items():
        same = torch.equal(target[k], v) if isinstance(v, torch.Tensor) else target[k] == v
        if not same:
            print(f"{k} differs after load", file=sys.stderr)
            return 1
    print(json.dumps({"save_s": t1 - t0, "load_s": t3 - t2, "save_cpu_s": c1 - c0, "load_cpu_s": c3 - c2}))
    return 0


if __name__ == "__main__":
    sys.exit(main())

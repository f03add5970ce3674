"""Client fixtures: Google's storage client pointed at the server under test, anonymous."""
from __future__ import annotations

import pytest


def storage_client(server):
    """google-cloud-storage Client for a local server: anonymous credentials, explicit endpoint."""
    from google.auth.credentials import AnonymousCredentials
    from google.cloud import storage

    return storage.Client(project="test", credentials=AnonymousCredentials(),
                          client_options={"api_endpoint": server.url})


@pytest.fixture
def gclient(gcs_server):
    return storage_client(gcs_server)


@pytest.fixture
def flux_client(flux_server):
    return storage_client(flux_server)

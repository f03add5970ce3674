"""The embedded server's gRPC side, tested last (under tests/zonal/): once this process has served gRPC, its
gRPC threads are forked with every DataLoader worker a later test starts, which a training process, whose
server is elsewhere, never does. The server tests' fixtures (`srv`, `bkt`) apply here too."""
from tests.server.conftest import _clean_profile, bkt, srv  # noqa: F401 - fixtures

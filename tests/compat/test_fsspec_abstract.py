"""fsspec's own abstract test suite (copy, get, put, pipe, open) for flux:// against the embedded server.

The fixtures below are all the suite needs from an implementation: the filesystem, a fresh root
per test and how paths join. GCS has no empty directories, which the suite accounts for.
"""
from __future__ import annotations

import posixpath

import pytest
from fsspec.tests.abstract import (AbstractCopyTests, AbstractFixtures, AbstractGetTests, AbstractOpenTests,
                                   AbstractPipeTests, AbstractPutTests)

from tests.conftest import make_fs


class FluxFixtures(AbstractFixtures):
    @pytest.fixture(scope="class")
    def fs(self, flux_server):
        return make_fs(flux_server)

    @pytest.fixture
    def fs_join(self):
        return posixpath.join

    @pytest.fixture
    def fs_path(self, bucket):
        return f"{bucket}/root"

    @pytest.fixture
    def supports_empty_directories(self):
        return False  # a "directory" exists while an object lives under it


class TestFluxCopy(AbstractCopyTests, FluxFixtures):
    pass


class TestFluxGet(AbstractGetTests, FluxFixtures):
    pass


class TestFluxPut(AbstractPutTests, FluxFixtures):
    pass


class TestFluxPipe(AbstractPipeTests, FluxFixtures):
    pass


class TestFluxOpen(AbstractOpenTests, FluxFixtures):
    pass

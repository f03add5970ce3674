"""Packages are found, never listed by hand: `pipes/` installs as `fluxfs.pipes` with every subpackage it has
(a hand-kept list once left `fluxfs.pipes.distributed` out of the wheel). Everything else is in setup.cfg."""
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent

setup(packages=find_packages(str(HERE), include=["fluxfs", "fluxfs.*"])
      + ["fluxfs." + name for name in find_packages(str(HERE), include=["pipes", "pipes.*"])])

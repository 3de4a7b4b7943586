"""The installed package's version, read from its metadata (``pyproject.toml`` is the one place
it is written)."""

from importlib import metadata

try:
    VERSION: str = metadata.version("diffcost")
except metadata.PackageNotFoundError:  # a source tree that was never installed: no version
    VERSION = "0+unknown"  # a PEP 440 local version below every release

"""The installed package's version, from its metadata (the one place it is declared is
``pyproject.toml``)."""

from __future__ import annotations

from functools import cache


@cache
def package_version() -> str:
    """``0.1.0`` as installed; ``0+unknown`` when rnnport runs from a tree not installed."""
    from importlib import metadata

    try:
        return metadata.version("rnnport")
    except metadata.PackageNotFoundError:
        return "0+unknown"

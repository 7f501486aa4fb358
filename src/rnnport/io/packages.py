"""Outputs written as folders (a format's packages), told by their name and their marker
file; kept apart from :mod:`.atomic` so that declaring one imports nothing more."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

__all__ = ["Package"]


@dataclass(frozen=True)
class Package:
    """Outputs a format writes as folders: those whose name ends in ``suffix``. An existing
    folder there is replaced only when it is one of them, a folder holding the file
    ``marker`` (never any other folder)."""

    suffix: str
    marker: str

    def names(self, path: Path) -> bool:
        """Whether the output ``path`` is written as such a folder."""
        return path.name.lower().endswith(self.suffix)

    def holds(self, path: str | os.PathLike[str]) -> bool:
        """Whether ``path`` is such a folder (not a link to one) holding its marker file."""
        try:
            return stat.S_ISDIR(os.lstat(path).st_mode) and \
                stat.S_ISREG(os.lstat(Path(path) / self.marker).st_mode)
        except (OSError, ValueError):
            return False

    def refusal(self, target: str) -> str:
        return (f"{target}: is a folder, and no {self.suffix} package (no {self.marker} in "
                "it); rnnport replaces only a package folder. Choose another output path. "
                "Nothing was written.")

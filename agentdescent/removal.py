"""A folder an agent worked in, removed whole: the write and search bits an agent (or a tool it ran,
such as `go mod download`) took off folders inside it are put back first, as their owner may.

    remove_tree(path)  ->  True once nothing is left at `path`

Left out: folders of other users (their bits are not ours to change) and anything that follows a
link (`shutil.rmtree` removes a link, never what it points to).
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable
from pathlib import Path


def remove_tree(path: Path | str) -> bool:
    """Remove the folder `path` with all it holds; whether it is gone."""
    def writable_then_again(function: Callable[..., object], failed: str, _: object) -> None:
        for folder in {os.path.dirname(failed), failed}:
            with contextlib.suppress(OSError):
                os.chmod(folder, 0o700, follow_symlinks=False)
        with contextlib.suppress(OSError):
            function(failed)

    shutil.rmtree(path, onerror=writable_then_again)
    if os.path.lexists(path):
        shutil.rmtree(path, ignore_errors=True)
    return not os.path.lexists(path)

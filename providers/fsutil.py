"""Small file helpers: atomic writes and private directories."""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def ensure_private_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


def atomic_write_text(path: Path, text: str, mode: int = 0o644, *, durable: bool = True) -> None:
    """Write via a temp file in the same directory and rename, so readers never see half a file.

    durable=False skips the fsync: the file still survives its writer being killed (the page cache
    is the kernel's), just not a power cut — for files whose companions are not synced either."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException as exc:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        if isinstance(exc, OSError) and exc.filename is None:  # a full disk fails the write, not the open
            raise OSError(exc.errno, exc.strerror, str(path)) from exc
        raise


def atomic_write_json(path: Path, data: Any, mode: int = 0o644, *, durable: bool = True) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n", mode, durable=durable)

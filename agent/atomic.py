"""Atomic file writes: a reader sees the old file or the new one, never a part of either.

The data goes to a temporary file in the target's own directory (a rename is only atomic within
one file system), is flushed and fsynced, then `os.replace`d onto the target; the directory is
fsynced afterwards so the rename itself survives a power cut. On any error the temporary file is
removed and the target is left as it was.
"""

from __future__ import annotations

import contextlib
import functools
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

StrPath = str | os.PathLike[str]

_MODES = {"w": "w", "wt": "w", "wb": "wb"}


@functools.lru_cache(maxsize=1)
def _umask() -> int:
    # os.umask can only be read by setting it, which races with other threads creating files;
    # Linux publishes it in /proc, so that is tried first.
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    except OSError:
        return  # not every platform lets a directory be opened (Windows); the rename still holds
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_writer(path: StrPath, mode: str = "w", *, encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """Open a temporary file to write `path` through; it replaces `path` when the block ends.

    mode is "w" (text, `encoding`, "\\n" line ends) or "wb". Parent directories are created.
    The new file gets the permissions of the file it replaces, or 0o666 less the umask (the
    temporary file would otherwise keep mkstemp's 0o600).
    """
    if mode not in _MODES:
        raise ValueError(f"atomic_writer mode must be one of {', '.join(_MODES)}, got {mode!r}")
    target = Path(path)
    directory = target.parent
    directory.mkdir(parents=True, exist_ok=True)
    try:
        perms = stat.S_IMODE(os.stat(target).st_mode)
    except FileNotFoundError:
        perms = 0o666 & ~_umask()
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=directory)
    tmp = Path(tmp_name)
    try:
        # fdopen closes fd itself if it fails (an unknown encoding), so fd is never closed twice.
        if _MODES[mode] == "wb":
            f: IO[Any] = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding=encoding, newline="\n")
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, perms)
        os.replace(tmp, target)
    except BaseException:
        # BaseException too: a KeyboardInterrupt mid-write must not leave a stray temp file.
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    _fsync_dir(directory)


def atomic_write_bytes(path: StrPath, data: bytes) -> None:
    """Replace `path` by `data` atomically."""
    with atomic_writer(path, "wb") as f:
        f.write(data)


def atomic_write_text(path: StrPath, text: str, *, encoding: str = "utf-8") -> None:
    """Replace `path` by `text` atomically (written as is: no newline translation)."""
    with atomic_writer(path, "w", encoding=encoding) as f:
        f.write(text)

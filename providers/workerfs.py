"""The one door to what workers write: every host-side read, write, list, remove or chmod of a
path under a worktree, a run folder (providers/<key>/runs/<id>/…) or a run HOME goes through here.

A worker is hostile, and its sandbox lets it write those trees: any name there may have become a
symbolic link (`config/claude -> ~/.claude`, `state/served.jsonl -> ~/.bashrc`), a FIFO (a read
that never returns), a device or a socket, or a file of any size, between two calls of ours. So
every call here starts from a directory the host opened itself (the `root`, never inside what
the worker can rename) and opens each component below it relative to its parent (`dir_fd`) with
O_NOFOLLOW: a link anywhere on the way is reported or replaced, never followed; only regular
files are read, and at most `limit` bytes; a FIFO, device or socket is skipped with a line
(`Skipped`), never opened for reading; writes go to a fresh temp name in the opened directory and
are renamed over the target, so a link or hard link planted there is replaced, not written
through. The stdlib has no openat2(RESOLVE_BENEATH) and no library in our deps wraps it; the walk
below is that, one component at a time.

tests/test_workerfs_door.py keeps this the only door: it fails on any other open, Path.read_*/
write_*, os.chmod, shutil.* or os.remove/unlink/rename of such a path in core/, providers/, tui/.
"""

from __future__ import annotations

import errno
import os
import re
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Literal

DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# O_NONBLOCK: a name swapped for a FIFO since its lstat must not hang the open
FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
READ_LIMIT = 256 << 20  # the most any host-side reader takes of one worker-written file
_CHUNK = 1 << 20  # read(find=...) searches past the limit this much at a time


class WorkerTreeError(OSError):
    """A worker-written tree is not what the host may use (a link or special file where a
    directory or regular file must be); the message names the path."""


@dataclass(frozen=True)
class TreeEntry:
    """What host-side code may take of one path in a tree a worker wrote (read)."""

    kind: Literal["file", "link", "missing", "other"]
    data: bytes = b""        # file: its first `limit` bytes; link: the link's own target text
    truncated: bool = False  # file: it holds more than `limit` bytes
    at: str = ""             # link/other: the path (relative to the root) that is one
    size: int = 0            # file: its whole size
    found_past: bool = False  # file, truncated: read(find=...) found the pattern past `limit`

    def text(self) -> str:
        """The file's text (undecodable bytes replaced), or how a link or special file is shown."""
        if self.kind == "link":
            return f"{self.at} -> {os.fsdecode(self.data)} (a symbolic link, not followed)"
        if self.kind == "other":
            return f"{self.at}: not a regular file"
        return self.data.decode("utf-8", errors="replace")


@dataclass(frozen=True)
class Skipped:
    """A name a walk did not read, and why: `line()` is what the caller shows."""

    rel: str
    why: str  # "a symbolic link", "a FIFO", "a device", "a socket", "larger than N bytes"

    def line(self) -> str:
        return f"{self.rel}: skipped, {self.why} (worker-written, not read)"


def _parts(rel: Path | str) -> tuple[str, ...]:
    p = Path(rel)
    parts = p.parts
    if not parts or p.is_absolute() or any(x in ("..", ".") for x in parts):
        raise ValueError(f"{rel!r} is not a plain relative path inside the tree")
    return parts


def _kind_of(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a regular file"


def _close(fd: int) -> None:
    try:
        os.close(fd)
    except OSError:
        pass


def open_root(root: Path | str) -> int:
    """An fd of the tree's root. The root is the host's (a run folder it made, a worktree it
    added): its own path may pass through the host's links (a resumed run's id links to the
    original run's folder), everything below it is opened with open_dir/read."""
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


@contextmanager
def opened(root: Path | str) -> Iterator[int]:
    fd = open_root(root)
    try:
        yield fd
    finally:
        _close(fd)


def _claim_dir(parent: int, name: str, mode: int) -> int:
    """An fd of directory `name` in `parent`, made when missing; anything else the worker left
    under that name (a link, a file, a FIFO) is removed first, never followed."""
    for _ in range(8):  # a worker racing us: each round removes what it put there
        try:
            return os.open(name, DIR_FLAGS, dir_fd=parent)
        except FileNotFoundError:
            try:
                os.mkdir(name, mode, dir_fd=parent)
            except FileExistsError:
                pass
        except OSError as exc:
            if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                raise
            os.unlink(name, dir_fd=parent)  # a link or non-directory: unlink removes the name only
    raise WorkerTreeError(errno.EBUSY, "kept changing while it was made a directory", name)


def _walk_to(root: int, parts: tuple[str, ...], *, make: bool, mode: int = 0o700) -> int:
    """An fd of the directory parts[...] under `root`: made (claimed) when `make`, else opened
    (WorkerTreeError when a component is a link or no directory). The caller closes it."""
    fd = os.dup(root)
    try:
        for i, name in enumerate(parts):
            if make:
                nxt = _claim_dir(fd, name, mode)
            else:
                try:
                    nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                        raise WorkerTreeError(exc.errno, "not a directory (a link is not followed)",
                                              "/".join(parts[:i + 1])) from None
                    raise
            os.close(fd)
            fd = nxt
        return fd
    except BaseException:
        _close(fd)
        raise


def open_dir(root_fd: int, rel: str) -> int:
    """An fd of the existing directory `rel` below an opened root, no link followed on the way
    (WorkerTreeError otherwise). The caller closes it."""
    return _walk_to(root_fd, _parts(rel), make=False)


# --- reading -------------------------------------------------------------------------------------

def read(root: Path | str, rel: Path | str, limit: int = READ_LIMIT, *, find: re.Pattern[bytes] | None = None,
         span: int = 0) -> TreeEntry:
    """`rel` under `root` without following any symlink, at most `limit` bytes.

    A link anywhere on the way (`README.md -> ~/.ssh/id_rsa`, `docs -> /`) comes back as a link
    with its target text; a FIFO or device as "other", never opened for reading; an absolute or
    `..` path is refused (ValueError). `find`: for a file longer than `limit`, the rest is searched
    for the pattern (whose matches are at most `span` bytes long) a chunk at a time, in the same
    opened file (`found_past`)."""
    parts = _parts(rel)
    try:
        fd = open_root(root)
    except (FileNotFoundError, NotADirectoryError):
        return TreeEntry("missing")
    try:
        return _read_at(fd, parts, limit, find, span)
    finally:
        _close(fd)


def _read_at(fd: int, parts: tuple[str, ...], limit: int, find: re.Pattern[bytes] | None = None,
             span: int = 0) -> TreeEntry:
    own = False
    try:
        for i, name in enumerate(parts):
            here = "/".join(parts[:i + 1])
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except (FileNotFoundError, NotADirectoryError):
                return TreeEntry("missing")
            if stat.S_ISLNK(st.st_mode):
                return TreeEntry("link", os.fsencode(os.readlink(name, dir_fd=fd)), at=here)
            if i < len(parts) - 1:
                if not stat.S_ISDIR(st.st_mode):
                    return TreeEntry("missing")
                try:
                    nxt = os.open(name, DIR_FLAGS, dir_fd=fd)
                except OSError as exc:
                    if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # swapped for a link since the lstat
                        return TreeEntry("link", os.fsencode(os.readlink(name, dir_fd=fd)), at=here)
                    raise
                if own:
                    os.close(fd)
                fd, own = nxt, True
                continue
            if not stat.S_ISREG(st.st_mode):
                return TreeEntry("other", at=here)
            try:
                ffd = os.open(name, FILE_FLAGS, dir_fd=fd)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    return TreeEntry("link", os.fsencode(os.readlink(name, dir_fd=fd)), at=here)
                raise
            with os.fdopen(ffd, "rb") as fh:
                fst = os.fstat(ffd)
                if not stat.S_ISREG(fst.st_mode):
                    return TreeEntry("other", at=here)
                data = fh.read(limit + 1)
                found = len(data) > limit and find is not None and _found_in_rest(fh, data, find, span)
            return TreeEntry("file", data[:limit], truncated=len(data) > limit, size=fst.st_size, found_past=found)
        return TreeEntry("missing")
    finally:
        if own:
            _close(fd)


def _found_in_rest(fh: BinaryIO, head: bytes, find: re.Pattern[bytes], span: int) -> bool:
    """Whether `find` matches in what follows `head` in `fh` (a match may start inside head's last
    `span` bytes: each chunk is searched with the tail of the one before)."""
    tail = head[-span:] if span > 0 else b""
    if find.search(tail) is not None:  # head holds one byte past the limit: a match may end on it
        return True
    while chunk := fh.read(_CHUNK):
        window = tail + chunk
        if find.search(window) is not None:
            return True
        tail = window[-span:] if span > 0 else b""
    return False


read_in_tree = read  # the name the tree readers (gates, claims, the sim) have always used


def read_text(root: Path | str, rel: Path | str, limit: int = READ_LIMIT) -> str | None:
    """The text of a regular file (None when it is missing, a link or a special file)."""
    entry = read(root, rel, limit)
    return entry.data.decode("utf-8", errors="replace") if entry.kind == "file" else None


def lexists(root: Path | str, rel: Path | str) -> bool:
    """Whether anything (a link included, never followed) is at `rel`."""
    parts = _parts(rel)
    try:
        with opened(root) as fd:
            d = _walk_to(fd, parts[:-1], make=False)
            try:
                os.stat(parts[-1], dir_fd=d, follow_symlinks=False)
                return True
            finally:
                _close(d)
    except (FileNotFoundError, NotADirectoryError, WorkerTreeError):
        return False


@dataclass(frozen=True)
class FileAt:
    """One regular file a walk found: its path relative to the root, its size and mode."""

    rel: str
    size: int
    mode: int


def walk(root: Path | str, under: str = "", *, skip_names: frozenset[str] = frozenset(),
         skip_dirs: Callable[[str], bool] | None = None,
         on_skip: Callable[[Skipped], None] | None = None, limit: int = READ_LIMIT,
         reopen: bool = False) -> Iterator[FileAt]:
    """Every regular file under `root`, depth first by name. Links (to files or directories)
    are not followed, FIFOs, devices, sockets and files over `limit` are not yielded: each goes to
    `on_skip` as a Skipped. `skip_names`: file names passed over silently (the host's own).
    `under`: walk only that folder of the tree (reached without following a link); the paths
    yielded stay relative to `root`. `reopen`: a folder whose mode closes it to its owner is
    opened to the owner (0700) and walked (the tree is the walker's own, as a run folder is)."""
    try:
        fd = open_root(root)
    except (FileNotFoundError, NotADirectoryError):
        return
    if under:
        try:
            sub = _walk_to(fd, _parts(under), make=False)
        except (FileNotFoundError, NotADirectoryError, WorkerTreeError):
            return
        finally:
            _close(fd)
        fd = sub
    yield from _walk_fd(fd, f"{under}/" if under else "", skip_names, skip_dirs, on_skip, limit, reopen)


def _walk_fd(fd: int, prefix: str, skip_names: frozenset[str], skip_dirs: Callable[[str], bool] | None,
             on_skip: Callable[[Skipped], None] | None, limit: int, reopen: bool = False) -> Iterator[FileAt]:
    try:
        try:
            names = sorted(os.listdir(fd))
        except OSError:
            return
        for name in names:
            rel = f"{prefix}{name}"
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISDIR(st.st_mode):
                if skip_dirs is not None and skip_dirs(rel):
                    continue
                try:
                    sub = _open_dir_at(fd, name, reopen)
                except PermissionError:
                    if on_skip is not None:
                        on_skip(Skipped(rel, "a directory its mode closes"))
                    continue
                except OSError:
                    if on_skip is not None:
                        on_skip(Skipped(rel, "a directory that became a link"))
                    continue
                yield from _walk_fd(sub, rel + "/", skip_names, skip_dirs, on_skip, limit, reopen)
            elif stat.S_ISREG(st.st_mode):
                if name in skip_names:
                    continue
                if st.st_size > limit:
                    if on_skip is not None:
                        on_skip(Skipped(rel, f"larger than {limit} bytes"))
                    continue
                yield FileAt(rel, st.st_size, st.st_mode)
            elif name not in skip_names and on_skip is not None:
                on_skip(Skipped(rel, _kind_of(st.st_mode)))
    finally:
        _close(fd)


def _open_dir_at(fd: int, name: str, reopen: bool) -> int:
    try:
        return os.open(name, DIR_FLAGS, dir_fd=fd)
    except PermissionError:
        if not reopen or not _chmod_at(fd, name, 0o700):
            raise
        return os.open(name, DIR_FLAGS, dir_fd=fd)


@contextmanager
def linked_aside(root: Path | str, rel_dir: str, names: tuple[str, ...],
                 optional: tuple[str, ...] = ()) -> Iterator[Path | None]:
    """For a library that opens by path and writes in place (SQLite: a database, its -wal, its
    -shm): a folder of the host's own, made in `root` (the run folder, which is read-only in the
    worker's sandbox), holding a second hard link to each of `names`, and to each of `optional`
    that exists, of the folder `rel_dir`, under the same names. Its path runs through no name the
    worker can swap for a link after a check (the library resolves it again), and what is written
    there lands in the worker's own inodes (its locks too: a live holder is still seen).

    None, and nothing to open, when one of them is not a regular file this tree alone holds: a
    link, a FIFO, or a file with a hard link elsewhere (an operator's file, written through)."""
    with opened(root) as rfd:
        d = _walk_to(rfd, _parts(rel_dir), make=False) if rel_dir else os.dup(rfd)
        aside = f".aside-{os.getpid()}-{os.urandom(4).hex()}"
        try:
            os.mkdir(aside, 0o700, dir_fd=rfd)
            afd = os.open(aside, DIR_FLAGS, dir_fd=rfd)
        except BaseException:
            _close(d)
            raise
        try:
            yield Path(root) / aside if _link_sole(d, afd, names, optional) else None
        finally:
            for n in os.listdir(afd):  # our links, and what the library made beside them
                os.unlink(n, dir_fd=afd)
            os.close(afd)
            os.rmdir(aside, dir_fd=rfd)
            _close(d)


def _link_sole(d: int, afd: int, names: tuple[str, ...], optional: tuple[str, ...]) -> bool:
    for n in (*names, *optional):
        try:
            os.link(n, n, src_dir_fd=d, dst_dir_fd=afd, follow_symlinks=False)  # a link is linked, not followed
        except FileNotFoundError:
            if n in optional:
                continue
            return False
        except OSError:
            return False
        st = os.stat(n, dir_fd=afd, follow_symlinks=False)  # ours: no one else can swap it
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 2:  # the worker's name and ours, no more
            return False
    return True


# --- writing -------------------------------------------------------------------------------------

def make_dir(root: Path | str, rel: Path | str, mode: int = 0o700) -> None:
    """Directory `rel` (and those above it) under `root`, each a real directory of `mode`: a
    link or file the worker left under one of those names is removed, never followed."""
    with opened(root) as fd:
        d = _walk_to(fd, _parts(rel), make=True, mode=mode)
        try:
            os.fchmod(d, mode)
        finally:
            _close(d)


def write(root: Path | str, rel: Path | str, data: bytes | str, mode: int = 0o600) -> None:
    """Atomically put `data` at `rel` under `root`: the directories on the way are claimed
    (make_dir), the file is written under a fresh name in its opened directory and renamed over
    whatever was there (a link or hard link is replaced, never written through)."""
    parts = _parts(rel)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with opened(root) as fd:
        d = _walk_to(fd, parts[:-1], make=True)
        try:
            _write_at(d, parts[-1], raw, mode)
        finally:
            _close(d)


def _write_at(d: int, name: str, raw: bytes, mode: int) -> None:
    tmp = f".{name}.{os.getpid()}.{os.urandom(4).hex()}.tmp"
    wfd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=d)
    try:
        with os.fdopen(wfd, "wb") as fh:
            fh.write(raw)
            os.fchmod(fh.fileno(), mode)
        try:
            os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
        except OSError as exc:
            if exc.errno not in (errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST):
                raise
            import shutil  # lazy, as in remove()

            shutil.rmtree(name, dir_fd=d)  # a folder the worker put where the host's file goes
            os.rename(tmp, name, src_dir_fd=d, dst_dir_fd=d)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=d)
        except OSError:
            pass
        raise


def append(root: Path | str, rel: Path | str, data: bytes | str) -> bool:
    """Append to the regular file at `rel` (made 0600 when missing). False, and nothing written,
    when the worker put something else there (a link, a FIFO, a file with other hard links)."""
    parts = _parts(rel)
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with opened(root) as fd:
        d = _walk_to(fd, parts[:-1], make=True)
        try:
            try:
                afd = os.open(parts[-1], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
                              | os.O_CLOEXEC, 0o600, dir_fd=d)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):
                    return False
                raise
            try:
                st = os.fstat(afd)
                if not stat.S_ISREG(st.st_mode) or st.st_nlink != 1:
                    return False
                os.write(afd, raw)
                return True
            finally:
                os.close(afd)
        finally:
            _close(d)


@contextmanager
def _parent_of(root: Path | str, rel: Path | str) -> Iterator[tuple[int, str] | None]:
    """The open folder that holds `rel` and its last name, walked without following a link; None
    when a folder on the way is missing or is not one."""
    parts = _parts(rel)
    with opened(root) as fd:
        try:
            d = _walk_to(fd, parts[:-1], make=False)
        except (FileNotFoundError, WorkerTreeError):
            yield None
            return
        try:
            yield d, parts[-1]
        finally:
            _close(d)


def remove(root: Path | str, rel: Path | str) -> bool:
    """Remove whatever is at `rel` (a link itself, a file, a whole directory tree, nothing followed);
    False when nothing was there."""
    with _parent_of(root, rel) as where:
        if where is None:
            return False
        d, name = where
        try:
            st = os.stat(name, dir_fd=d, follow_symlinks=False)
        except FileNotFoundError:
            return False
        if stat.S_ISDIR(st.st_mode):
            import shutil  # lazy: it pulls in the archive modules, which dispatch never needs

            # rmtree with dir_fd walks by fd and never follows a link (shutil._use_fd_functions)
            shutil.rmtree(name, dir_fd=d)
        else:
            os.unlink(name, dir_fd=d)
        return True


def rmdir(root: Path | str, rel: Path | str) -> bool:
    """Remove the empty directory at `rel` (False when it is not one: rmdir never follows a link)."""
    with _parent_of(root, rel) as where:
        if where is None:
            return False
        try:
            os.rmdir(where[1], dir_fd=where[0])
            return True
        except OSError:
            return False


def chmod(root: Path | str, rel: Path | str, mode: int) -> bool:
    """chmod a directory or regular file at `rel` ("" for the root itself); False for a link, a
    file with another hard link, or anything else (Linux has no lchmod, and a chmod through a link would change its target). The
    name is pinned by an O_PATH fd, which opens whatever its mode (a worker's mode-000 file too), and
    changed through that fd's /proc link, which names the pinned inode, never a path again."""
    if str(rel) in ("", "."):
        with opened(root) as fd:
            os.fchmod(fd, mode)
        return True
    with _parent_of(root, rel) as where:
        return where is not None and _chmod_at(where[0], where[1], mode)


def _chmod_at(d: int, name: str, mode: int) -> bool:
    try:
        t = os.open(name, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=d)
    except OSError:
        return False
    try:
        st = os.fstat(t)
        # a file with a second link is also a file elsewhere (a worker may link one of the
        # operator's in): its mode is not the tree's to change
        if not (stat.S_ISDIR(st.st_mode) or (stat.S_ISREG(st.st_mode) and st.st_nlink == 1)):
            return False
        os.chmod(f"/proc/self/fd/{t}", mode)
        return True
    except OSError:
        return False
    finally:
        os.close(t)


"""Atomic outputs: every file the client writes appears whole or not at all.

A file is written to a temporary name in its own folder (`.NAME.PID.RANDOM.tmp`), flushed to disk
and renamed over NAME (`os.replace`, atomic on POSIX and Windows within one file system). A
reader of NAME sees the old file or the new one, never an empty or partial one, whatever the
number of concurrent writers (the last rename wins). A folder is swapped into place the same way
(`swap_dir`, used by `data/staging.py`).

Output paths are checked first, one rule for every `--out`: a folder, a missing or unwritable
folder, or a path that is not a file are refused as bad input (exit 2) naming the flag and the
path; an I/O failure while writing (disk full) is an error naming the path, never a traceback,
and leaves no temporary file behind.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import secrets
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from blackwell_sm.errors import BsmError, SpecError

_SWAP_TRIES = 20


def _where(flag: str | None, path: Path) -> str:
    return f"{flag} {path}" if flag else str(path)


def check_out_path(path: str | Path, *, flag: str | None = "--out") -> Path:
    """The file path to write, checked: not a folder, in a folder that exists and can be
    written (SpecError naming `flag` and the path otherwise). A link is followed to its file."""
    path = Path(path)
    where = _where(flag, path)
    if path.is_symlink():
        path = path.resolve()
    if path.is_dir():
        raise SpecError(
            f"{where} is a folder; a file path is needed",
            field=flag,
            hint=f"give a file inside it, e.g. {path / 'out.file'}",
        )
    if path.exists() and not path.is_file():
        raise SpecError(f"{where} exists and is not a regular file", field=flag)
    parent = path.parent
    if not parent.is_dir():
        what = "is not a folder" if parent.exists() else "does not exist"
        raise SpecError(
            f"{where}: the folder {parent} {what}",
            field=flag,
            hint=f"create it first (mkdir -p {parent}) or write elsewhere",
        )
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _unwritable(where, parent, flag)
    return path


def _unwritable(where: str, parent: Path, flag: str | None, why: str = "") -> SpecError:
    return SpecError(
        f"{where}: cannot write in the folder {parent}" + (f" ({why})" if why else ""),
        field=flag,
        hint="write to a folder you can write to (it is read-only or not yours)",
    )


@contextlib.contextmanager
def atomic_open(
    path: str | Path, mode: str = "wb", *, flag: str | None = "--out", replace: bool = True
) -> Iterator[IO]:
    """Yield a file open on a temporary name beside `path`; when the block ends without error
    it is flushed, synced and renamed to `path`, else removed. `replace=False` never replaces
    an existing `path` (it is linked into place, which fails if the name exists)."""
    if mode not in ("w", "wb"):
        raise ValueError(f"atomic_open writes whole files: mode 'w' or 'wb', not {mode!r}")
    target = check_out_path(path, flag=flag)
    where = _where(flag, Path(path))
    if not replace and os.path.lexists(path):
        raise _exists(where, flag)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)  # umask applies
    except PermissionError as e:
        raise _unwritable(where, target.parent, flag, e.strerror or "") from None
    except OSError as e:
        raise _write_failed(where, e) from None
    try:
        f: IO[Any] = os.fdopen(fd, "wb") if mode == "wb" else os.fdopen(fd, "w", encoding="utf-8")
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, target)
        else:
            os.link(tmp, path)  # no-clobber: FileExistsError if someone wrote it meanwhile
            tmp.unlink()
    except FileExistsError:
        tmp.unlink(missing_ok=True)
        raise _exists(where, flag) from None
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise _write_failed(where, e) from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _exists(where: str, flag: str | None) -> SpecError:
    return SpecError(
        f"{where} exists; it is never overwritten", field=flag, hint="remove it or pick a new name"
    )


def _write_failed(where: str, e: OSError) -> BsmError:
    return BsmError(
        f"could not write {where}: {e.strerror or e}",
        code="write_failed",
        hint="nothing was left half-written; free space or pick another place, and run again",
    )


def write_bytes(path: str | Path, data: bytes, *, flag: str | None = "--out") -> Path:
    """Write `data` to `path` atomically; returns the path written."""
    with atomic_open(path, "wb", flag=flag) as f:
        f.write(data)
    return Path(path)


def write_text(
    path: str | Path, text: str, *, flag: str | None = "--out", replace: bool = True
) -> Path:
    """Write `text` (UTF-8) to `path` atomically (never over an existing file when `replace`
    is False); returns the path written."""
    with atomic_open(path, "wb", flag=flag, replace=replace) as f:
        f.write(text.encode("utf-8"))
    return Path(path)


# -- folders ----------------------------------------------------------------------------------
def _exchange() -> Any:
    """renameat2(RENAME_EXCHANGE) on Linux (glibc >= 2.28): swaps two paths in one step."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    return fn


_AT_FDCWD, _RENAME_EXCHANGE = -100, 2


def _swap(a: Path, b: Path) -> bool:
    """Exchange `a` and `b` atomically; False where the system cannot."""
    fn = _exchange()
    if fn is None:
        return False
    if fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # this file system cannot exchange
    raise OSError(err, os.strerror(err), str(b))


def swap_dir(tmp: Path, out: Path, *, replace: bool = True, flag: str | None = "--out") -> None:
    """Put the complete folder `tmp` in place as `out`.

    Without `replace`, `out` must be missing or empty when the rename happens (the rename itself
    checks): a writer that finds it filled by another is refused (exit 2), its folder removed
    by the caller. With `replace` on Linux, `out` is exchanged with `tmp` in one step, so a
    reader always finds a whole folder there and concurrent writers each succeed (the last one
    wins); elsewhere the old folder is moved aside first, and `out` is missing for an instant.
    A writer that keeps losing the race gets an error, never a traceback.
    """
    where = _where(flag, out)
    for _ in range(_SWAP_TRIES):
        try:
            if not replace or not out.exists():
                tmp.rename(out)  # onto nothing or an empty folder only
                return
            if _swap(tmp, out):  # tmp now holds the old folder
                shutil.rmtree(tmp, ignore_errors=True)
                return
            old = out.with_name(f".{out.name}.{os.getpid()}.{secrets.token_hex(4)}.old")
            out.rename(old)
            tmp.rename(out)
            shutil.rmtree(old, ignore_errors=True)
            return
        except OSError as e:
            if not replace and e.errno in (errno.ENOTEMPTY, errno.EEXIST):
                raise SpecError(
                    f"{where} was filled by another writer while this one worked",
                    field=flag,
                    hint="pass --overwrite to replace it, or a new folder",
                ) from None
            if e.errno in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOENT):
                continue  # another writer moved or filled `out` between our look and rename
            if isinstance(e, PermissionError):
                raise _unwritable(where, out.parent, flag, e.strerror or "") from None
            raise _write_failed(where, e) from None
    raise BsmError(
        f"could not put {where} in place: other writers kept replacing it ({_SWAP_TRIES} tries)",
        code="concurrent_write",
        hint=f"{out} holds another writer's complete output; run again when they are done",
    )

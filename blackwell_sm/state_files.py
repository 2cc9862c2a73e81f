"""One opener for the files of the state folder (locks, purchase records, caches).

A state file is opened without following a symlink (`O_NOFOLLOW`: a link planted in the state
folder can never make bsm truncate or rewrite its target) and without blocking (`O_NONBLOCK`:
a FIFO does not hang the command); what was opened must be a regular file. A folder, FIFO,
device, socket, symlink or symlink loop in its place is refused as bad input (SpecError, exit
2) naming the file, before a byte is read or written.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path
from typing import IO

from blackwell_sm.errors import SpecError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISLNK(mode):
        return "a symlink"
    return "not a regular file"


def _refuse(path: Path, what: str, field: str | None) -> SpecError:
    return SpecError(
        f"state file {path} is {what}; bsm reads and writes only regular files there",
        field=field,
        hint=f"remove {path} (bsm makes it again), or set BSM_STATE_DIR to another folder",
    )


def open_state(path: str | Path, mode: str = "a+", *, field: str | None = None) -> IO[str]:
    """Open the state file `path` as text in `mode` ("r", "a+" or "w"; "a+" and "w" create it)
    under the rules above; the caller closes it."""
    flags = {"r": os.O_RDONLY, "a+": os.O_RDWR | os.O_CREAT, "w": os.O_WRONLY | os.O_CREAT}
    if mode not in flags:
        raise ValueError(f"open_state: mode 'r', 'a+' or 'w', not {mode!r}")
    p = Path(path)
    try:
        fd = os.open(p, flags[mode] | _NOFOLLOW | _NONBLOCK, 0o600)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise _refuse(p, "a symlink (or a symlink loop)", field) from None
        if e.errno == errno.EISDIR:
            raise _refuse(p, "a folder", field) from None
        if e.errno in (errno.ENXIO, errno.ENODEV):
            raise _refuse(p, "a FIFO, socket or device", field) from None
        raise SpecError(
            f"cannot open state file {p}: {e.strerror or e}",
            field=field,
            hint="set BSM_STATE_DIR to a folder this user can write",
        ) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _refuse(p, _kind(st.st_mode), field)
        os.set_blocking(fd, True)
        if mode == "w":
            os.ftruncate(fd, 0)
        return os.fdopen(fd, mode if mode != "w" else "w", encoding="utf-8")
    except BaseException:
        os.close(fd)
        raise


def check_state_entry(path: str | Path, *, field: str | None = None) -> None:
    """Refuse (SpecError) a state entry that exists and is not a regular file, without
    following a link: a record's name taken by a folder, FIFO, device or symlink."""
    p = Path(path)
    try:
        st = os.lstat(p)
    except FileNotFoundError:
        return
    except OSError as e:
        raise SpecError(f"cannot read state file {p}: {e.strerror or e}", field=field) from None
    if not stat.S_ISREG(st.st_mode):
        raise _refuse(p, _kind(st.st_mode), field)

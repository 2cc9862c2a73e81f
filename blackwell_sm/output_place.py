"""Where an output may go: one rule, checked against a command's inputs before anything is written.

Every command that writes (`data prepare`, `report`, `calibrate`, `run-local`, `init`) asks this
module first. An output is refused (SpecError, exit 2, naming the flag and both paths) when it

- is an input: the same path, a symlink to it, or a hard link (the same device and inode);
- contains an input: a folder holding it, however deep (through links too);
- lies inside an input folder, unless the command writes its own file there (`report`'s
  default `RUN_DIR/report.html`): then an existing file in it that the command did not write
  (the run's metrics, its plan) is refused as any such file is.

And an existing output is replaced only when this command wrote it (`--overwrite` included):

- a file carries its command's mark inside it (`file_mark`: the report's `<title>`, the
  calibration profile's first line); a file without it is never overwritten;
- a folder carries a record of what the command put there (`RECORD`, `.bsm-output.json`,
  written last into the staged folder): it is replaced only when everything in it is listed
  there, so nothing else in the folder is ever deleted.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from pathlib import Path

from blackwell_sm.errors import SpecError

RECORD = ".bsm-output.json"
_MARK_BYTES = 64 << 10  # a mark sits in a file's head
_SHOWN = 5


def _real(path: Path) -> Path:
    return Path(os.path.realpath(path))


def _ino(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _under(child: Path, parent: Path) -> bool:
    return child != parent and parent in child.parents


def check_against_inputs(
    out: str | Path,
    inputs: Iterable[str | Path],
    *,
    flag: str = "--out",
    new_file_inside: bool = False,
) -> None:
    """Refuse `out` when it is, contains or lies inside one of `inputs` (see the module
    docstring). `new_file_inside`: a file may be written inside an input folder; the caller
    then refuses an existing one it did not write (`file_mark`)."""
    out = Path(out)
    real_out, out_ino = _real(out), _ino(out)
    for raw in inputs:
        src = Path(raw)
        real_in, in_ino = _real(src), _ino(src)
        why = None
        if real_out == real_in or (out_ino is not None and out_ino == in_ino):
            why = "is the input"
        elif _under(real_in, real_out):
            why = "is a folder holding the input"
        elif _under(real_out, real_in) and not new_file_inside:
            why = "lies inside the input"
        if why:
            raise SpecError(
                f"{flag} {out} {why} {src}; an output never replaces or holds what a command "
                "reads, so nothing was written",
                field=flag,
                hint="write the output somewhere else (a new file or folder beside the input)",
            )


def distinct_inputs(inputs: Iterable[str | Path], *, field: str = "INPUT") -> None:
    """Refuse the same input given twice (by any name: a link, a hard link)."""
    seen: dict[object, Path] = {}
    for raw in inputs:
        p = Path(raw)
        key: object = _ino(p) or _real(p)
        if key in seen:
            raise SpecError(
                f"{p} is the same file as {seen[key]}: an input given twice would be read twice",
                field=field,
                hint="give each input once",
            )
        seen[key] = p


def file_mark(path: Path, mark: str, *, command: str, flag: str = "--out") -> None:
    """An existing `path` is replaced only when `mark` is in its head (the command wrote it);
    SpecError otherwise. A missing path passes."""
    if not os.path.lexists(path):
        return
    try:
        with open(path, "rb") as f:  # check_out_path refused anything but a regular file
            head = f.read(_MARK_BYTES)
    except OSError as e:
        raise SpecError(f"{flag} {path}: cannot read it ({e.strerror or e})", field=flag) from None
    if mark.encode("utf-8") not in head:
        raise SpecError(
            f"{flag} {path} exists and was not written by {command}; it is never overwritten",
            field=flag,
            hint="remove it yourself, or pick a new file name",
        )


def record_folder(folder: Path, command: str) -> None:
    """Write `folder`'s record of ownership: every entry in it, written by `command`."""
    from blackwell_sm.atomic_write import write_text

    names = sorted(p.name for p in folder.iterdir() if p.name != RECORD)
    body = json.dumps({"written_by": command, "entries": names}, indent=1) + "\n"
    write_text(folder / RECORD, body, flag=None)


def _recorded(folder: Path, command: str) -> set[str] | None:
    from blackwell_sm.safe_load import load_mapping

    if not (folder / RECORD).is_file() or (folder / RECORD).is_symlink():
        return None
    try:
        data = load_mapping(folder / RECORD, field=RECORD)
    except SpecError:
        return None
    entries = data.get("entries")
    if data.get("written_by") != command or not isinstance(entries, list):
        return None
    return {e for e in entries if isinstance(e, str)}


def replaceable_folder(out: Path, *, command: str, flag: str = "--out") -> None:
    """A non-empty folder `out` may be replaced only when its record says `command` wrote
    everything in it; SpecError naming what it did not write otherwise."""
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return
    recorded = _recorded(out, command)
    foreign = [n for n in names if n != RECORD and (recorded is None or n not in recorded)]
    if recorded is not None and not foreign:
        return
    more = f" and {len(foreign) - _SHOWN} more" if len(foreign) > _SHOWN else ""
    what = ", ".join(foreign[:_SHOWN]) + more
    why = (
        f"it holds {what}, which {command} did not write"
        if recorded is not None
        else f"it holds {what}, and no record ({RECORD}) says {command} wrote it"
    )
    raise SpecError(
        f"{flag} {out} is not replaced: {why}; --overwrite replaces only this command's own output",
        field=flag,
        hint="remove those files yourself, or pick a new folder",
    )


def check_file_output(
    out: str | Path,
    inputs: Iterable[str | Path],
    *,
    mark: str,
    command: str,
    flag: str = "--out",
) -> Path:
    """The whole check of a file output: a writable file path (`atomic_write.check_out_path`),
    not an input nor holding one (a new file inside an input folder is fine), and, when it
    exists, written by `command` (its `mark`). Returns the path."""
    from blackwell_sm.atomic_write import check_out_path

    local = [p for p in inputs if os.path.lexists(p)]
    check_against_inputs(out, local, flag=flag, new_file_inside=True)
    path = check_out_path(out, flag=flag)
    file_mark(path, mark, command=command, flag=flag)
    return Path(out)


def read_files(path: str | Path | None) -> list[Path]:
    """The inputs a command reads from `path`: the file itself, or a folder's own files (a
    tokenizer folder: an output may lie in it, never over or around the files it holds)."""
    if path is None:
        return []
    p = Path(path)
    try:
        return sorted(c for c in p.iterdir() if c.is_file()) if p.is_dir() else [p]
    except OSError:  # unreadable: the command's own reading refuses it, naming it
        return [p]

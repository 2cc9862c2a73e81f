"""An output folder written whole or not at all: `bsm data prepare` writes into a fresh hidden
folder beside `--out` and renames it into place only when everything is written.

An `--out` that is, holds or lies inside an input is refused (`output_place`). A non-empty
`--out` is refused unless `overwrite`, and even then unless its record (`.bsm-output.json`,
written last) lists everything in it: only this command's own output is ever replaced. The old
folder is swapped out only after the new one is complete (so an error leaves the old data as it
was), in one step where the system can (`atomic_write.swap_dir`): concurrent `--overwrite`
writers each put a whole folder in place (the last one wins) and a reader never finds a partial
one. On any error the temporary folder, and any parent folders this created, are removed: never
a half-written or empty folder.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

from blackwell_sm.atomic_write import swap_dir
from blackwell_sm.errors import SpecError
from blackwell_sm.output_place import check_against_inputs, record_folder, replaceable_folder

COMMAND = "bsm data prepare"

_SHOWN = 5


def check_out(out: Path, *, overwrite: bool, inputs: Sequence[Path] = ()) -> None:
    """Refuse an `--out` that is a file or a link, that is, holds or lies in one of `inputs`
    (`output_place`), or a folder with something in it: unless `overwrite`, and then only
    when this command's record lists everything in it."""
    check_against_inputs(out, inputs, flag="--out")
    if out.is_symlink() or (out.exists() and not out.is_dir()):
        raise SpecError(
            f"--out {out} exists and is not a folder",
            field="--out",
            hint="pass a new folder path (a link is not followed: pass its target)",
        )
    if out.is_dir() and overwrite:
        replaceable_folder(out, command=COMMAND, flag="--out")
    elif out.is_dir():
        names = sorted(p.name for p in out.iterdir())
        if names:
            more = f" and {len(names) - _SHOWN} more" if len(names) > _SHOWN else ""
            raise SpecError(
                f"--out {out} is not empty (it holds {', '.join(names[:_SHOWN])}{more})",
                field="--out",
                hint="pass --overwrite to replace it, or a new folder: old shards left beside "
                "new ones would be trained on",
            )


def _first_missing(path: Path) -> Path | None:
    """The topmost ancestor of `path` (or itself) that does not exist yet."""
    missing = None
    for p in [path, *path.parents]:
        if p.exists():
            break
        missing = p
    return missing


@contextlib.contextmanager
def staged_dir(out: Path, *, overwrite: bool = False) -> Iterator[Path]:
    """Yield a fresh temporary folder beside `out`; when the block ends without error it
    becomes `out`, else it is removed."""
    out = Path(out)
    check_out(out, overwrite=overwrite)
    created = _first_missing(out.parent)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    except OSError as e:
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise SpecError(
            f"--out {out}: cannot write in {out.parent} ({e.strerror or e})",
            field="--out",
            hint="write to a folder you can write to (it is read-only, not a folder, or not yours)",
        ) from None
    try:
        yield tmp
        record_folder(tmp, COMMAND)  # what --overwrite may later replace, and nothing else
        umask = os.umask(0)
        os.umask(umask)
        tmp.chmod(0o777 & ~umask)  # mkdtemp's 0700 would follow the folder into place
        check_out(out, overwrite=overwrite)  # again: another writer may have filled it since
        swap_dir(tmp, out, replace=overwrite, flag="--out")
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if created is not None:
            shutil.rmtree(created, ignore_errors=True)
        raise

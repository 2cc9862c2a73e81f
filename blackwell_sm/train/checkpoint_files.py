"""A checkpoint's files and their checksums: hashed as they are written, checked before a load.

Every file a save writes gets a sha256 as it is written: DCP's writer is given a file system
(`HashingFileSystem`) whose streams are followed by a hashing thread reading each file from the
page cache behind the writer (`_HashingStream`: in blocks, nothing held whole or copied), so the
hash overlaps the serialisation and the fsync instead of following them; the small files
written with `torch.save` (RNG states) are hashed after the write. The `COMPLETE` marker lists each file with its size and
hash (`FileSum`). benchmarks/checkpoint_checksum.py measures what this adds to a save.

Before any rank loads a checkpoint, `verify_share` checks this host's copy: the files are split
between the host's local ranks, each reads its share once and compares size and hash, and every
rank learns the verdict before anyone calls `dcp.load` (checkpoint.py). A flipped byte anywhere,
a truncated or missing file, is named with the file, what was expected and what was found.
`describe_error` turns DCP's `CheckpointException ranks:dict_keys([0])` into the real cause.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch.distributed.checkpoint.filesystem import FileSystem

ALGORITHM = "sha256"
BLOCK = 16 << 20  # bytes per read when a file is hashed from disk


class FileSum(BaseModel):
    """One file of a checkpoint as written: its size and sha256."""

    model_config = ConfigDict(extra="forbid")
    bytes: int = Field(ge=0, description="Size in bytes.")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$", description="sha256 of the whole file.")


class _HashingStream:
    """A write stream whose file is hashed while it is being written.

    A helper thread follows the file: it reads what the writer has put in it so far (from the
    page cache, in blocks) and hashes it, waking at each write, until the file is closed; so the
    hash runs beside DCP's serialisation and its fsync instead of after them (hashlib and the
    I/O release the GIL). Nothing the writer passes is kept or copied. A seek (DCP writes
    sequentially) makes the followed hash meaningless: the file is then hashed again at close."""

    def __init__(self, raw: Any, path: Path) -> None:
        self.raw, self.path = raw, path
        self._more = threading.Event()
        self._closed = threading.Event()
        self._sum: FileSum | None = None
        self._error: BaseException | None = None
        self._seeked = False
        self._thread = threading.Thread(target=self._follow, daemon=True, name="bsm-ckpt-hash")
        self._thread.start()

    def write(self, b: Any) -> int:
        n = self.raw.write(b)
        self._more.set()
        return n

    def seek(self, *args: Any) -> int:
        self._seeked = True
        return self.raw.seek(*args)

    def _follow(self) -> None:
        try:
            h, pos = hashlib.new(ALGORITHM), 0
            with open(self.path, "rb", buffering=0) as f:
                while True:
                    closed = self._closed.is_set()  # read before the size: nothing comes after
                    size = os.fstat(f.fileno()).st_size
                    while pos < size:
                        block = os.pread(f.fileno(), min(BLOCK, size - pos), pos)
                        if not block:
                            break
                        h.update(block)
                        pos += len(block)
                    if closed:
                        break
                    self._more.wait(0.05)
                    self._more.clear()
            self._sum = FileSum(bytes=pos, sha256=h.hexdigest())
        except BaseException as e:  # re-raised by digest(), in the writing thread
            self._error = e

    def digest(self) -> FileSum:
        """The file's sum, once it is closed."""
        self._closed.set()
        self._thread.join()
        if self._error is not None:
            raise self._error
        if self._sum is None or self._seeked:
            return hash_file(self.path)
        return self._sum

    def __getattr__(self, name: str) -> Any:  # tell, flush, fileno, close, writable, ...
        return getattr(self.raw, name)


class HashingFileSystem(FileSystem):
    """DCP's local file system, recording a `FileSum` for every file written through it
    (keyed by file name; a rename, as DCP does for `.metadata`, carries the sum along)."""

    def __init__(self) -> None:
        super().__init__()
        self.sums: dict[str, FileSum] = {}
        self.waited_s = 0.0  # time the writer waited for hashes after closing (their cost)
        self._lock = threading.Lock()

    @contextlib.contextmanager
    def create_stream(self, path: str | os.PathLike, mode: str) -> Iterator[Any]:
        if "w" not in mode and "a" not in mode:
            with super().create_stream(path, mode) as raw:
                yield raw
            return
        with super().create_stream(path, mode) as raw:
            stream = _HashingStream(raw, Path(path))
            yield stream
        t0 = time.perf_counter()
        total = stream.digest()  # closed: every byte is in the file
        with self._lock:
            self.sums[Path(path).name] = total
            self.waited_s += time.perf_counter() - t0

    def rename(self, path: str | os.PathLike, new_path: str | os.PathLike) -> None:
        super().rename(path, new_path)
        with self._lock:
            if Path(path).name in self.sums:
                self.sums[Path(new_path).name] = self.sums.pop(Path(path).name)


def hash_file(path: Path) -> FileSum:
    """The `FileSum` of a file on disk, read in `BLOCK`s."""
    h = hashlib.new(ALGORITHM)
    size = 0
    with open(path, "rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
            size += len(block)
    return FileSum(bytes=size, sha256=h.hexdigest())


def check_file(folder: Path, rel: str, want: FileSum) -> str | None:
    """None if `folder/rel` has the size and hash the marker lists, else what differs."""
    path = folder / rel
    try:
        size = path.stat().st_size
    except OSError as e:
        return f"{rel}: cannot be read ({e.strerror or e})"
    if size != want.bytes:
        what = "truncated" if size < want.bytes else "longer than written"
        return f"{rel}: {size:,} bytes, the marker lists {want.bytes:,} ({what})"
    try:
        have = hash_file(path)
    except OSError as e:
        return f"{rel}: cannot be read ({e.strerror or e})"
    if have.sha256 != want.sha256:
        return (
            f"{rel}: sha256 {have.sha256[:16]}… differs from the {want.sha256[:16]}… written "
            "with the save (bytes changed since)"
        )
    return None


def verify_share(
    folder: Path, sums: dict[str, FileSum], local_rank: int, local_world: int
) -> str | None:
    """Check this local rank's share of the files (every `local_world`-th, by name) on this
    host's copy; None when all agree, else the first problem found."""
    for rel in sorted(sums)[local_rank::local_world]:
        problem = check_file(folder, rel, sums[rel])
        if problem:
            return problem
    return None


def local_world_size(default: int) -> int:
    """Ranks on this host (torchrun's LOCAL_WORLD_SIZE; `default` outside torchrun)."""
    text = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(text) if text.isdigit() and int(text) > 0 else default


def parse_sums(raw: Any) -> dict[str, FileSum]:
    """The marker's `files` mapping as FileSums (ValueError naming the entry if malformed)."""
    if not isinstance(raw, dict):
        raise ValueError(f"files: expected a mapping, got {type(raw).__name__}")
    out = {}
    for rel, entry in raw.items():
        parts = Path(rel).parts
        if not parts or Path(rel).is_absolute() or ".." in parts:
            raise ValueError(f"files: {rel!r} is not a path inside the checkpoint")
        try:
            out[rel] = FileSum.model_validate(entry)
        except ValidationError as e:
            err = e.errors()[0]
            where = ".".join(str(p) for p in err["loc"])
            raise ValueError(f"files.{rel}{'.' + where if where else ''}: {err['msg']}") from None
    return out


def describe_error(e: BaseException) -> str:
    """One line with the real cause: DCP's CheckpointException lists each rank's exception
    (its str is `CheckpointException ranks:dict_keys([0])` and a traceback)."""
    failures = getattr(e, "failures", None)
    if isinstance(failures, dict) and failures:
        rank, wrapped = sorted(failures.items(), key=lambda kv: kv[0])[0]
        inner = wrapped[0] if isinstance(wrapped, tuple) and wrapped else wrapped
        more = f" (and {len(failures) - 1} more rank(s))" if len(failures) > 1 else ""
        return f"rank {rank}: {describe_error(inner)}{more}"
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()] or [""]
    text = f"{type(e).__name__}: {lines[0][:300]}"
    cause = e.__cause__ or e.__context__
    if cause is not None and str(cause) and str(cause) not in text:
        text += f" (caused by {type(cause).__name__}: {str(cause).splitlines()[0][:200]})"
    return text


def save_error(e: BaseException, *, step: int, root: Path, rank: int) -> Any:
    """A failed checkpoint write as a BsmError that says where, why, and whether the disk is full.

    Writers report ENOSPC in many shapes (torch.save says only "unexpected pos"), so the free
    space left is measured too, not only parsed from the message.
    """
    import shutil

    from blackwell_sm.errors import BsmError

    free = shutil.disk_usage(root).free
    cause = describe_error(e)
    text = f"{cause} {e} {e.__cause__} {e.__context__}"
    full = free < 2**20 or "No space left" in text or "Errno 28" in text
    head = "No space left on device: " if full else ""
    return BsmError(
        f"{head}checkpoint save of step {step} to {root} failed on rank {rank}: {cause} "
        f"(free space there: {free / 2**20:.0f} MiB)",
        hint="give the job a larger volume (job.volume_size_gb) or keep fewer checkpoints "
        "(training.checkpoint.keep_last)"
        if full
        else None,
    )

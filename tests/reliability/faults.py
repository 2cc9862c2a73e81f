"""The fault runner: one /opt/ml directory restarted through a chain of injected faults.

A chain is what a SageMaker job's life looks like when things go wrong: the real launcher starts
(→ torchrun → 2 gloo workers on CPU, `tiny` model), a fault hits it at a step chosen from a seed,
and it is started again on the same directory (checkpoints kept), until a last, clean launch
finishes the run. Each fault is injected from outside the processes, the way it happens for real:

    kill_rank        SIGKILL one worker after it logged step s (a dead GPU / host)
    sigterm          SIGTERM the launcher (PID 1) after step s (StopTrainingJob, max runtime)
    expiry_s/_ms     SAGEMAKER_CURRENT_CAPACITY_BLOCK_EXPIRATION_TIMESTAMP a few seconds ahead, in
                     seconds or milliseconds; at that moment the capacity is gone (SIGKILL all)
    save_crash       SIGKILL rank 1 the instant its shard file of the save at step s is closed
                     (inotify), i.e. between the shard files and the COMPLETE marker
    disk_full        the checkpoint directory is a small tmpfs; after step s it is filled, so the
                     next save hits ENOSPC; the restart gets its space back (a fresh instance)

After every launch the runner records the newest complete checkpoint the next launch must resume
from; `check_chain` compares everything with an uninterrupted reference run of the same plan.
"""

from __future__ import annotations

import ctypes
import itertools
import os
import random
import shutil
import signal
import struct
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from harness import (  # noqa: E402
    Launch,
    OptMlHost,
    complete_checkpoints,
    free_port,
    metric_records,
)
from train_support import local_plan  # noqa: E402

from blackwell_sm.planner.plan import Plan  # noqa: E402
from blackwell_sm.train.triggers import EXPIRY_ENV  # noqa: E402

STEPS = 20
INTERVAL = 4
EXPIRY_AHEAD_S = 300.0  # far past any start-up, well inside the worker's 600 s margin
KINDS = ("kill_rank", "sigterm", "expiry_s", "expiry_ms", "save_crash", "disk_full")


def fault_plan(seed: int = 0) -> Plan:
    """The plan every chain and its reference run: 20 steps, a checkpoint every 4, keep 2."""
    return local_plan(
        steps=STEPS,
        training={
            "seed": seed,
            "checkpoint": {
                "interval_steps": INTERVAL,
                "interval_minutes": None,
                "keep_last": 2,
                "async_save": False,
            },
        },
    )


@dataclass
class Fault:
    kind: str
    step: int  # the step after which it strikes


@dataclass
class Outcome:
    """What one faulted launch did."""

    fault: Fault
    rc: int
    resume_from: int  # newest complete checkpoint after it: where the next launch must start
    last_logged: int  # the furthest step this launch logged
    injected: bool  # the fault struck where it should (e.g. inside the save window)
    note: str = ""
    failure: str = ""  # DIR/output/failure as this launch left it (what SageMaker would show)

    @property
    def steps_lost(self) -> int:
        return max(0, self.last_logged - self.resume_from)


@dataclass
class Chain:
    root: Path
    plan: Plan
    faults: list[Fault]
    outcomes: list[Outcome] = field(default_factory=list)
    final_rc: int | None = None
    starts: list[int] = field(default_factory=list)  # newest checkpoint before each launch
    offsets: list[int] = field(default_factory=list)  # metrics records before each launch
    tmpfs: bool = False

    def launches(self) -> list[dict[int, float]]:
        """step -> loss logged by each launch, in order."""
        recs = metric_records(self.root)
        bounds = [*self.offsets, len(recs)]
        return [{r["step"]: r["loss"] for r in recs[a:b]} for a, b in itertools.pairwise(bounds)]


# -- choosing faults --------------------------------------------------------------------------
def choose_faults(seed: int, n: int, kinds: tuple[str, ...] = KINDS) -> list[Fault]:
    """`n` faults at increasing steps in (0, STEPS), kinds and steps drawn from `seed`.

    Each later fault strikes at least 2 steps after the previous one, so each launch makes
    progress. `n` is capped so a chain fits in the run's 20 steps.
    """
    rng = random.Random(seed)
    n = min(n, 5)
    picked = rng.sample(kinds, n) if n <= len(kinds) else [rng.choice(kinds) for _ in range(n)]
    out, step = [], 0
    for i, kind in enumerate(picked):
        room = STEPS - 1 - 3 * (n - i - 1)  # leave each later fault 3 steps
        step = rng.randint(step + 2, max(step + 2, min(room, step + 5)))
        if kind == "save_crash":
            step = -(-step // INTERVAL) * INTERVAL  # the next step that saves
        if kind == "disk_full" and step % INTERVAL == 0:
            step -= 1  # fill before the save at the next multiple, not during one
        out.append(Fault(kind, step))
    return out


# -- the tmpfs for disk_full ------------------------------------------------------------------
def mount_tmpfs(path: Path, size_mb: int) -> bool:
    """Mount a tmpfs of `size_mb` at `path` (root only); False when it is not permitted."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
        capture_output=True,
    )
    return r.returncode == 0


def umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True)


def tmpfs_available(tmp: Path) -> bool:
    probe = tmp / "tmpfs-probe"
    ok = mount_tmpfs(probe, 1)
    if ok:
        umount(probe)
    return ok


BALLAST = "ballast.bin"


def fill_disk(ckpt_dir: Path, leave_bytes: int = 256 * 1024) -> None:
    st = os.statvfs(ckpt_dir)
    free = st.f_bavail * st.f_frsize
    with open(ckpt_dir / BALLAST, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))


# -- inotify: the save-crash seam -------------------------------------------------------------
_IN_CREATE, _IN_CLOSE_WRITE, _IN_MOVED_TO, _IN_ISDIR = 0x100, 0x8, 0x80, 0x40000000


class _Inotify:
    """Minimal inotify through libc (Linux): a watch per directory, events as (wd, mask, name)."""

    def __init__(self) -> None:
        self.libc = ctypes.CDLL("libc.so.6", use_errno=True)
        self.fd = self.libc.inotify_init1(os.O_NONBLOCK)
        if self.fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")

    def watch(self, path: Path, mask: int) -> int:
        wd = self.libc.inotify_add_watch(self.fd, str(path).encode(), mask)
        if wd < 0:
            raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
        return wd

    def events(self, timeout: float) -> list[tuple[int, int, str]]:
        import select

        r, _, _ = select.select([self.fd], [], [], timeout)
        if not r:
            return []
        buf = os.read(self.fd, 65536)
        out, i = [], 0
        while i < len(buf):
            wd, mask, _cookie, n = struct.unpack_from("iIII", buf, i)
            name = buf[i + 16 : i + 16 + n].rstrip(b"\0").decode()
            out.append((wd, mask, name))
            i += 16 + n
        return out

    def close(self) -> None:
        os.close(self.fd)


class SaveCrasher:
    """SIGKILLs rank `rank` of `launch` as soon as its shard file of the save at `step` is closed.

    The file is `.step-XXXXXXXX.tmp/__<rank>_0.distcp` (DCP's per-rank name). Rank 0 can only
    write the COMPLETE marker after barriers rank `rank` never reaches, so the marker is never
    written — if the kill lands before those barriers, which `hit` reports after the fact.
    """

    def __init__(self, launch: Launch, ckpt_dir: Path, step: int, rank: int = 1) -> None:
        self.launch, self.ckpt_dir, self.step, self.rank = launch, ckpt_dir, step, rank
        self.tmp_name = f".step-{step:08d}.tmp"
        self.shard = f"__{rank}_0.distcp"
        self.killed = threading.Event()
        self._stop = threading.Event()
        self._ino = _Inotify()
        self._root_wd = self._ino.watch(ckpt_dir, _IN_CREATE)
        self._pids: dict[int, int] = {}
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        sub_wd = None
        try:
            while not self._stop.is_set() and not self.killed.is_set():
                if self.launch.proc.poll() is not None:
                    return
                if not self._pids:
                    self._pids = self.launch.worker_pids()  # before the save, while all live
                if sub_wd is None and (self.ckpt_dir / self.tmp_name).is_dir():
                    sub_wd = self._ino.watch(self.ckpt_dir / self.tmp_name, _IN_CLOSE_WRITE)
                    if (self.ckpt_dir / self.tmp_name / self.shard).exists():
                        self._kill()  # already written before the watch: kill now
                        return
                for wd, _mask, name in self._ino.events(0.05):
                    if wd == sub_wd and name == self.shard:
                        self._kill()
                        return
        finally:
            self._ino.close()

    def _kill(self) -> None:
        pid = self._pids.get(self.rank) or self.launch.worker_pids().get(self.rank)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                return
            self.killed.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def hit(self) -> bool:
        """Shard files of the save exist and its COMPLETE marker does not."""
        for d in (self.ckpt_dir / self.tmp_name, self.ckpt_dir / f"step-{self.step:08d}"):
            if d.is_dir() and list(d.glob("__*.distcp")) and not (d / "COMPLETE").exists():
                return True
        return False


# -- running a chain --------------------------------------------------------------------------
def _last_logged(root: Path, before: int) -> int:
    return max((r["step"] for r in metric_records(root)[before:]), default=0)


def _newest(root: Path) -> int:
    done = complete_checkpoints(root)
    return done[-1] if done else 0


def run_chain(root: Path, plan: Plan, faults: list[Fault], *, use_tmpfs: bool) -> Chain:
    """Start, fault and restart `root` through `faults`, then finish it with a clean launch."""
    host = OptMlHost.create(root, plan)
    ckpt = root / "checkpoints"
    chain = Chain(root=root, plan=plan, faults=faults)
    if use_tmpfs and any(f.kind == "disk_full" for f in faults):
        chain.tmpfs = mount_tmpfs(ckpt, 24)
    try:
        for fault in faults:
            chain.starts.append(_newest(root))
            chain.offsets.append(len(metric_records(root)))
            t0 = time.monotonic()
            chain.outcomes.append(_inject(host, fault, chain))
            o = chain.outcomes[-1]
            print(
                f"[faults] {fault.kind}@{fault.step}: rc={o.rc} resume_from={o.resume_from} "
                f"lost={o.steps_lost} injected={o.injected} {o.note} "
                f"({time.monotonic() - t0:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
        chain.starts.append(_newest(root))
        chain.offsets.append(len(metric_records(root)))
        final = host.start(port=free_port())
        chain.final_rc = final.wait(timeout=180)
    finally:
        for launch in host.launches:
            if launch.proc.poll() is None:
                launch.kill()
        if chain.tmpfs:
            _move_off_tmpfs(ckpt)
    return chain


def _move_off_tmpfs(ckpt: Path) -> None:
    keep = ckpt.with_name("checkpoints.kept")
    shutil.copytree(ckpt, keep, ignore=shutil.ignore_patterns(BALLAST))
    umount(ckpt)
    shutil.rmtree(ckpt, ignore_errors=True)
    keep.rename(ckpt)


def _inject(host: OptMlHost, fault: Fault, chain: Chain) -> Outcome:
    root, ckpt = host.root, host.root / "checkpoints"
    kind, step = fault.kind, fault.step
    injected, note, env = True, "", {}
    start = _newest(root)
    if kind in ("expiry_s", "expiry_ms"):
        # The block ends 300 s after this launch starts: inside the worker's 600 s margin, so it
        # must save an insurance checkpoint right after its first step.
        stamp = time.time() + EXPIRY_AHEAD_S
        env[EXPIRY_ENV] = f"{stamp * 1000:.0f}" if kind == "expiry_ms" else f"{stamp:.0f}"
    launch = host.start(port=free_port(), env=env)
    crasher = None
    try:
        if kind == "kill_rank":
            launch.wait_for_step(step)
            launch.kill_rank(1)
        elif kind == "sigterm":
            launch.wait_for_step(step)
            launch.signal(signal.SIGTERM)
        elif kind in ("expiry_s", "expiry_ms"):
            m = launch.wait_for(r"capacity block expiry in (-?\d+) s")
            left = float(m.group(1))
            saved = launch.wait_for(r"checkpoint step (\d+) saved")
            insurance = int(saved.group(1))
            injected = 0 < left <= EXPIRY_AHEAD_S and insurance == start + 1
            note = f"deadline read as {left:.0f} s away; insurance save at step {insurance}"
            # Instances start terminating before the block ends: all processes die at once.
            launch.wait_for_step(max(step, insurance + 1))
            launch.kill()
        elif kind == "save_crash":
            crasher = SaveCrasher(launch, ckpt, step)
        elif kind == "disk_full":
            launch.wait_for_step(step)
            fill_disk(ckpt) if chain.tmpfs else None
            injected = chain.tmpfs
            note = "" if chain.tmpfs else "no tmpfs (not root): ran as a plain launch"
        rc = launch.wait(timeout=180)
    finally:
        if crasher is not None:
            crasher.stop()
        if launch.proc.poll() is None:
            launch.kill()
    if crasher is not None:
        injected = crasher.killed.is_set() and crasher.hit()
        note = "killed between shards and marker" if injected else "save window missed"
    failure = host.failure() or ""
    if kind == "disk_full" and chain.tmpfs:
        out = launch.output.splitlines()
        enospc = [ln for ln in out if "No space left" in ln or "Errno 28" in ln]
        injected = injected and rc != 0 and bool(enospc)
        first = (enospc or [""])[0]
        at = max(first.find("No space left"), first.find("Errno 28"), 0)
        note = first[at : at + 120].strip()  # the excerpt that names the cause
        (ckpt / BALLAST).unlink(missing_ok=True)  # the restart is a fresh instance with space
    last = max(_last_logged(root, chain.offsets[-1]), start)
    return Outcome(fault, rc, _newest(root), last, injected, note, failure)


# -- checking ---------------------------------------------------------------------------------
def safetensors_bytes(model_dir: Path) -> dict[str, bytes]:
    from safetensors.torch import load_file

    out: dict[str, bytes] = {}
    for f in sorted(model_dir.glob("*.safetensors")):
        for k, t in load_file(str(f)).items():
            out[k] = t.contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes()
    return out


def check_chain(
    chain: Chain, reference: dict[int, float], ref_model: dict[str, bytes]
) -> list[str]:
    """Every promise, as a list of broken ones (empty: the chain survived)."""
    problems = []
    if chain.final_rc != 0:
        problems.append(f"final launch exited {chain.final_rc}")
    segs = chain.launches()
    # each launch starts right after the newest complete checkpoint it found
    for i, (seg, start) in enumerate(zip(segs, chain.starts, strict=True)):
        if seg and min(seg) != start + 1:
            problems.append(f"launch {i} started at step {min(seg)}; newest checkpoint {start}")
    for o in chain.outcomes:
        if o.steps_lost > INTERVAL:
            problems.append(f"{o.fault.kind}@{o.fault.step}: lost {o.steps_lost} > {INTERVAL}")
    for i, seg in enumerate(segs):
        bad = {s: v for s, v in seg.items() if reference.get(s) != v}
        if bad:
            problems.append(f"launch {i}: losses differ from the reference at steps {sorted(bad)}")
    if max((max(s) for s in segs if s), default=0) != STEPS:
        problems.append(f"the run never logged step {STEPS}")
    model = safetensors_bytes(chain.root / "model")
    if model != ref_model:
        problems.append("the exported model differs from the reference's")
    return problems

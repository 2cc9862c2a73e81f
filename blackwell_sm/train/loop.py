"""The training loop: build the planned model, train it, checkpoint, export, summarise.

Everything comes from the plan: `plan.config` (parallelism, batch, precision, checkpointing) and
`plan.spec` (model shape, optimizer, schedule, data, checkpoint policy).
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

from blackwell_sm.errors import BsmError
from blackwell_sm.opt_ml import OptMl
from blackwell_sm.planner.plan import Plan
from blackwell_sm.records import Summary
from blackwell_sm.train.checkpoint import Checkpointer, run_identity
from blackwell_sm.train.context_parallel import CpGroup
from blackwell_sm.train.data import (
    SYNTHETIC_VALIDATION_OFFSET,
    BatchLayout,
    ShardDataset,
    SyntheticDataset,
)
from blackwell_sm.train.distributed import (
    Env,
    all_agree,
    build_cp_mesh,
    build_mesh,
    init_distributed,
)
from blackwell_sm.train.guard import NanGuard
from blackwell_sm.train.loss import counted_targets, loss_sum
from blackwell_sm.train.metrics_log import MetricsLog, log, runtime_gib
from blackwell_sm.train.model import Transformer
from blackwell_sm.train.optim import build_optimizer, clip_grad_norm, lr_at, set_lr
from blackwell_sm.train.parallelize import apply_plan, materialize
from blackwell_sm.train.precision import after_optimizer_step, check_precision
from blackwell_sm.train.triggers import Triggers


def _datasets(plan: Plan, paths: OptMl):
    """(train, validation or None) datasets the plan's data spec names."""
    d, spec, seq = plan.spec.training.data, plan.spec.model, plan.config.seq_len
    seed = plan.spec.training.seed
    if d.source == "synthetic":
        train: SyntheticDataset | ShardDataset = SyntheticDataset(seq, spec.vocab_size, seed)
        return train, (train if d.validation_interval_steps else None)
    train = ShardDataset(paths.channel(d.train_channel), seq, spec.vocab_size)
    val = None
    if d.validation_channel:
        val = ShardDataset(paths.channel(d.validation_channel), seq, spec.vocab_size)
    elif d.validation_interval_steps:
        raise BsmError(
            "training.data.validation_interval_steps is set but no validation_channel is given",
            hint="set training.data.validation_channel, or unset validation_interval_steps",
        )
    return train, val


def _data_identity(train) -> dict:
    """The train channel's identity for the checkpoints (none for synthetic data: its seed and
    shape are in the run identity)."""
    identity = getattr(train, "identity", None)
    return {"train": identity} if identity is not None else {}


class Trainer:
    """One worker's share of the run."""

    def __init__(self, plan: Plan, paths: OptMl, env: Env) -> None:
        self.plan, self.paths, self.env = plan, paths, env
        cfg, tr = plan.config, plan.spec.training
        self.cfg, self.tr = cfg, tr
        # First, so a stop that arrives while the model is built still ends in a clean save.
        self.triggers = Triggers.from_env(tr.checkpoint)
        self.triggers.install_signal_handlers()
        check_precision(cfg.precision, env.device)  # before anything is built: no fallback
        runtime = runtime_gib(env.device)  # the CPU process's own size, before the model
        self.mesh = build_mesh(cfg, env)
        cp_mesh = build_cp_mesh(cfg, env)
        self.cp = None if cp_mesh is None else CpGroup.from_mesh(cp_mesh)
        # The ranks of a context-parallel group read the same sequences (each keeps its share).
        self.dp_rank = env.rank // cfg.cp_degree
        self.layout = BatchLayout(
            cfg.micro_batch_size, cfg.grad_accum_steps, cfg.data_parallel_size, cfg.seq_len
        )
        self.train_data, self.val_data = _datasets(plan, paths)

        torch.manual_seed(tr.seed)
        np.random.seed(tr.seed)
        with torch.device("meta"):
            model = Transformer(plan.spec.model, max_seq_len=cfg.seq_len)
        self.model = apply_plan(model, plan, self.mesh, self.cp)
        # With init_from, the weights come from the checkpoint or init_from, in run().
        materialize(self.model, env.device, tr.seed, init=tr.init_from is None)
        self.optimizer = build_optimizer(self.model, tr.optimizer, env.device)
        async_save = tr.checkpoint.async_save and env.device.type == "cuda"
        self.ckpt = Checkpointer(
            paths.checkpoints,
            env,
            keep_last=tr.checkpoint.keep_last,
            async_save=async_save,
            identity=run_identity(plan),
            data=_data_identity(self.train_data),
            accept_changed_data=tr.data.accept_changed_data,
        )
        self.metrics = MetricsLog(
            paths.output_data, plan, env.device, is_main=env.is_main, runtime_gib=runtime
        )
        self.guard = NanGuard(
            tr.max_bad_steps, rank=env.rank, metrics=self.metrics, is_main=env.is_main
        )
        self.total_steps = plan.run.steps

    # -- one step ----------------------------------------------------------------------------
    def _tensor(self, rows: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(rows).to(self.env.device, non_blocking=True)

    def _rows(self, rows) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]:
        """(tokens, loss mask, document ids) on the device: a dataset's rows are a token array,
        or (tokens, loss_mask, doc_ids) arrays for fine-tuning shards."""
        if isinstance(rows, np.ndarray):
            return self._tensor(rows), None, None
        tokens, mask, docs = rows
        return (
            self._tensor(tokens),
            None if mask is None else self._tensor(mask),
            None if docs is None else self._tensor(docs),
        )

    def _micro_batches(
        self, step: int
    ) -> list[tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None]]:
        return [
            self._rows(
                self.train_data.batch(self.layout.positions(step, m, self.dp_rank), self.tr.seed)
            )
            for m in range(self.cfg.grad_accum_steps)
        ]

    def _loss_sum(self, batch: tuple) -> torch.Tensor:
        return loss_sum(self.model, *batch)

    def train_step(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        """One optimizer step (0-based `step`); returns (mean token loss, grad norm) as 0-d
        tensors on the device: reading them waits for the GPU, so only logged steps do."""
        batches = self._micro_batches(step)
        # Normalise by the tokens of the whole step on all ranks, so every token weighs the same
        # however the batch is cut into micro-batches and ranks.
        n_tok = sum(counted_targets(*b, cp=self.cp) for b in batches)
        n_tok = torch.tensor(n_tok, device=self.env.device)
        dist.all_reduce(n_tok)
        n_tok = n_tok.clamp(min=1.0)  # a step of prompts only (or padding) counts nothing
        # FSDP averages gradients over all its ranks (CP ranks included: each holds part of every
        # sequence's loss); undo that to get a sum.
        scale = self.env.world_size / n_tok
        loss_total = torch.zeros((), device=self.env.device)
        for batch in batches:
            loss_sum = self.guard.poison(self._loss_sum(batch), step)
            (loss_sum * scale).backward()
            loss_total += loss_sum.detach()
        dist.all_reduce(loss_total)
        grad_norm = clip_grad_norm(self.model, self.tr.optimizer.grad_clip)
        if not self.guard.step_ok(step, loss_total, grad_norm):  # train/guard.py: skip the step
            self.optimizer.zero_grad(set_to_none=True)
            return loss_total / n_tok, grad_norm
        set_lr(self.optimizer, self.lr(step))
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        after_optimizer_step(self.model, self.cfg.precision)
        return loss_total / n_tok, grad_norm

    def lr(self, step: int) -> float:
        return lr_at(
            step, peak=self.tr.optimizer.lr, total_steps=self.total_steps, schedule=self.tr.schedule
        )

    @torch.no_grad()
    def validate(self) -> float:
        """Token-mean loss over `validation_steps` fixed batches (the same every time)."""
        assert self.val_data is not None
        offset = SYNTHETIC_VALIDATION_OFFSET if isinstance(self.val_data, SyntheticDataset) else 0
        total = torch.zeros((), device=self.env.device)
        n_tok = torch.zeros((), device=self.env.device)
        for i in range(self.tr.data.validation_steps):
            pos = self.layout.positions(i, 0, self.dp_rank) + offset
            batch = self._rows(self.val_data.batch(pos, self.tr.seed + 1))
            total += self._loss_sum(batch)
            n_tok += counted_targets(*batch, cp=self.cp)
        dist.all_reduce(total)
        dist.all_reduce(n_tok)
        return float(total / n_tok.clamp(min=1.0))

    # -- the run -----------------------------------------------------------------------------
    def run(self) -> Summary:
        env, cfg, spec = self.env, self.cfg, self.plan.spec.model
        log(
            f"model {spec.name} ({spec.n_params:,} params) on {env.world_size} x {env.device.type}; "
            f"mesh {dict(zip(self.mesh.mesh_dim_names, self.mesh.shape, strict=True))}, "
            f"precision {cfg.precision}, activation_checkpointing {cfg.activation_checkpointing}, "
            f"compile {cfg.compile}, micro_batch_size {cfg.micro_batch_size} x grad_accum_steps "
            f"{cfg.grad_accum_steps}, seq_len {cfg.seq_len}, cp_degree {cfg.cp_degree}, loss "
            f"{self.tr.loss_impl}, {self.total_steps} steps",
            is_main=env.is_main,
        )
        if self.tr.peft is not None:
            n_train = sum(p.numel() for p in self.model.parameters() if p.requires_grad)
            log(
                f"LoRA r {self.tr.peft.rank} on {', '.join(self.tr.peft.target_modules)}: "
                f"{n_train:,} trainable parameters ({100 * n_train / spec.n_params:.2f} %), "
                "the base frozen in bf16",
                is_main=env.is_main,
            )
        start, resumed_from = 0, None
        say = lambda m: log(m.removeprefix("[bsm] "), is_main=env.is_main)  # noqa: E731
        peft = self.tr.peft
        if peft is not None and self.tr.init_from:  # the frozen base is in no checkpoint
            self._init_from()
        # Past a complete checkpoint that fails to load, to the previous one (checkpoint.py).
        found = self.ckpt.resume(self.model, self.optimizer, log=say)
        if found is not None:
            start = resumed_from = found[0]
            newer = f" (newer than init_from {self.tr.init_from})" if self.tr.init_from else ""
            log(f"resumed from {found[1].name} at step {start}{newer}", is_main=env.is_main)
        elif self.tr.init_from and peft is None:
            self._init_from()
        if found is None and peft is not None and peft.init_adapter:
            from blackwell_sm.train.peft_adapter import load_adapter

            n = load_adapter(self.model, peft, Path(peft.init_adapter).expanduser())
            log(f"adapters: {n} tensors from {peft.init_adapter}", is_main=env.is_main)
        resumed = found[1].name if found else None
        self.metrics.start(
            start, resumed_from=resumed_from, checkpoint=resumed, world_size=env.world_size
        )
        if self.triggers.deadline is not None:
            left = self.triggers.deadline[0] - time.time()
            log(
                f"{self.triggers.deadline[1]} in {left:.0f} s; saving "
                f"{self.tr.checkpoint.expiry_margin_s:.0f} s ahead",
                is_main=env.is_main,
            )

        tokens_per_step = self.layout.global_batch * cfg.seq_len
        check = self.metrics.start_check(
            start_step=start,
            deadline=self.triggers.deadline,
            tokens_per_step=tokens_per_step,
            n_gpus=env.world_size,
        )
        step, status, last_saved = start, "completed", start if found else None
        # Step time is the mean over the steps since the last logged one (validation and saves
        # left out): the host waits for the GPU only when it logs.
        window_t0, window_steps, paused = time.perf_counter(), 0, 0.0
        while step < self.total_steps:
            with check.around(step):  # syncs and profiles only a few steps after warm-up
                loss, grad_norm = self.train_step(step)
            step += 1
            window_steps += 1
            paused += check.after(step)  # the [bsm-check] line, once; less the profiler's time
            logged = step % self.tr.log_interval_steps == 0 or step == self.total_steps
            if logged and self.guard.last_ok:  # a skipped step has its bad_step record
                loss_v, grad_norm_v = float(loss), float(grad_norm)  # the host sync
                if env.device.type == "cuda":
                    torch.cuda.synchronize()
                dt = (time.perf_counter() - window_t0 - paused) / window_steps
                self.metrics.step(
                    step,
                    loss=loss_v,
                    lr=self.lr(step - 1),
                    grad_norm=grad_norm_v,
                    tokens=tokens_per_step,
                    step_time_s=dt,
                    n_gpus=env.world_size,
                )
                window_t0, window_steps, paused = time.perf_counter(), 0, 0.0
            side_t0 = time.perf_counter()
            vi = self.tr.data.validation_interval_steps
            if self.val_data is not None and vi and step % vi == 0:
                self.metrics.validation(step, self.validate())
            save, stop = self.triggers.check(step)
            save, stop = all_agree(save, stop, device=env.device)
            save = save and (stop or self.guard.in_row == 0)  # not right after a NaN step
            if save:
                self.metrics.saved(step, self.ckpt.save(self.model, self.optimizer, step))
                self.triggers.saved()
                last_saved = step
                log(f"checkpoint step {step} saved", is_main=env.is_main)
            if stop:
                reason = self.triggers.stop_reason or "signal on another rank"
                status = f"stopped ({reason})"
                self.metrics.stopped(step, reason)
                log(f"{status} after step {step}; exiting cleanly", is_main=env.is_main)
                break
            if save or (self.val_data is not None and vi and step % vi == 0):
                paused += time.perf_counter() - side_t0
        if status == "completed" and last_saved != step:
            self.metrics.saved(step, self.ckpt.save(self.model, self.optimizer, step))
        self.ckpt.wait()
        if status == "completed" and self.tr.export_model:
            self._export()
        summary = self.metrics.summary(status=status, final_step=step, resumed_from=resumed_from)
        if env.is_main:
            self.metrics.write_summary(summary)
        return summary

    def _init_from(self) -> None:
        """Fill the model's (base) weights from `training.init_from`."""
        from blackwell_sm.train.hf_import import init_path, load_hf_weights

        assert self.tr.init_from is not None
        folder = init_path(self.tr.init_from, self.paths.channel("init"))
        n = load_hf_weights(self.model, self.plan.spec.model, folder)
        log(f"initialised {n} tensors from {folder}", is_main=self.env.is_main)

    def _export(self) -> None:
        """The trained model in Hugging Face's layout (a LoRA run: its PEFT adapter, and the
        merged weights under merged/ when `training.peft.export_merged`)."""
        from blackwell_sm.train.export import export_dtype, export_model

        spec, out, peft = self.plan.spec.model, self.paths.model, self.tr.peft
        source = None
        if self.tr.init_from:
            from blackwell_sm.train.hf_import import init_path

            source = init_path(self.tr.init_from, self.paths.channel("init"))
        tokenizer = getattr(self.train_data, "tokenizer_dir", None)
        if peft is not None:
            from blackwell_sm.spec import arch
            from blackwell_sm.train.peft_adapter import export_adapter

            hf_class = arch.FAMILIES[spec.family].hf_class
            export_adapter(
                self.model,
                peft,
                out,
                is_main=self.env.is_main,
                base=self.tr.init_from,
                hf_class=hf_class,
                tokenizer=tokenizer or source,
            )
            log(f"exported the LoRA adapter (PEFT) to {out}", is_main=self.env.is_main)
            if not peft.export_merged:
                return
            out = out / "merged"
        export_model(
            self.model,
            spec,
            out,
            is_main=self.env.is_main,
            dtype=export_dtype(spec, self.tr.export_dtype),
            source=source,
            tokenizer=tokenizer,
        )
        log(f"exported the model to {out}", is_main=self.env.is_main)


def train(plan: Plan, opt_ml: Path) -> Summary:
    """Run `plan` as this torchrun worker; returns the run summary (same on every rank)."""
    env = init_distributed()
    try:
        summary = Trainer(plan, OptMl(opt_ml), env).run()
        # Every rank past its last collective (export, summary) before any rank tears down: a
        # rank that leaves early resets the sockets of a peer still in a collective.
        dist.barrier()
        return summary
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()

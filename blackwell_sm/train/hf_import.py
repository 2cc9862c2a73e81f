"""Weights in: fill a (sharded) model from a Hugging Face safetensors folder, before step 0.

The folder holds `model.safetensors`, or shards listed by `model.safetensors.index.json`. Keys
come from the architecture description (`arch.param_table` + `arch.hf_key`, one table for the
four families). Before any tensor is read, the files' headers are checked with the client's own
check (`spec/hf_files.py`, torch-free): names, shapes, dtypes, byte ranges and file sizes. Then each rank reads
only the rows of its own shard of each parameter (safetensors' lazy slices), so no rank ever holds
a full copy of the model, on the host or the device.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from blackwell_sm.spec import ModelSpec, arch
from blackwell_sm.spec.hf_files import check_weights


def init_path(init_from: str, channel_dir: Path) -> Path:
    """Where `training.init_from` is inside the worker: the `init` channel for an s3:// URI."""
    return channel_dir if init_from.startswith("s3://") else Path(init_from).expanduser()


def check_checkpoint(spec: ModelSpec, folder: Path) -> dict[str, Path]:
    """Key -> file for every tensor the model needs, from the files' headers alone: the same
    check the client made (`spec/hf_files.py`), repeated on this copy before any tensor is
    read; refuses any mismatch (names, shapes, dtypes, sizes) naming the file and tensor."""
    return check_weights(spec, folder, field="training.init_from")


def _local_region(p: torch.Tensor) -> tuple[slice, ...]:
    """The index of this rank's shard of `p` in the full tensor (torch.chunk semantics per Shard
    placement, as FSDP2 and DTensor cut), or the whole tensor for a plain one."""
    region = [slice(0, n) for n in p.shape]
    if not hasattr(p, "placements"):
        return tuple(region)
    coord = p.device_mesh.get_coordinate()
    for mesh_dim, placement in enumerate(p.placements):
        if not placement.is_shard():
            continue
        d, parts = placement.dim, p.device_mesh.size(mesh_dim)
        lo, hi = region[d].start, region[d].stop
        size = -(-(hi - lo) // parts)
        start = min(lo + coord[mesh_dim] * size, hi)
        region[d] = slice(start, min(start + size, hi))
    return tuple(region)


@torch.no_grad()
def load_hf_weights(model: nn.Module, spec: ModelSpec, folder: Path) -> int:
    """Copy the checkpoint into `model`'s parameters (each rank its own slices); returns the
    number of tensors loaded. Refuses a mismatch before reading any tensor."""
    from safetensors import safe_open

    from blackwell_sm.train.lora import is_adapter

    where = check_checkpoint(spec, folder)
    # LoRA adapters (train/lora.py) are not in a base checkpoint: they start as PEFT's.
    params = {n: p for n, p in model.named_parameters() if not is_adapter(n)}
    by_file: dict[Path, list[str]] = {}
    for name in params:
        by_file.setdefault(where[arch.hf_key(name)], []).append(name)
    for f, names in sorted(by_file.items()):
        with safe_open(str(f), framework="pt") as sf:
            for name in names:
                p = params[name]
                local = p.to_local() if hasattr(p, "to_local") else p
                piece = sf.get_slice(arch.hf_key(name))[_local_region(p)]
                local.copy_(piece.to(local.dtype))
    return len(params)

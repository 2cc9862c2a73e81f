"""Weights in: fill a (sharded) model from a Hugging Face safetensors folder, before step 0.

The folder holds `model.safetensors`, or shards listed by `model.safetensors.index.json`. Keys
come from the architecture description (`arch.param_table` + `arch.hf_key`, one table for the
four families). Before any tensor is read, every name and shape is checked from the files'
headers: a missing, extra or wrong-shaped tensor is refused with the names. Then each rank reads
only the rows of its own shard of each parameter (safetensors' lazy slices), so no rank ever holds
a full copy of the model, on the host or the device.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from blackwell_sm.errors import BsmError
from blackwell_sm.spec import ModelSpec, arch

#: Tensors some checkpoints carry that the model does not need (old RoPE buffers).
_IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_SHOW = 8  # names listed per kind of mismatch


def init_path(init_from: str, channel_dir: Path) -> Path:
    """Where `training.init_from` is inside the worker: the `init` channel for an s3:// URI."""
    return channel_dir if init_from.startswith("s3://") else Path(init_from).expanduser()


def _files(folder: Path) -> list[Path]:
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        from blackwell_sm.safe_load import load_mapping

        data = load_mapping(index, field="training.init_from", fmt="json", max_bytes=64 << 20)
        weight_map = data.get("weight_map")
        if not isinstance(weight_map, dict):
            raise BsmError(f"{index}: no weight_map", field="training.init_from")
        return [folder / f for f in sorted(set(weight_map.values()))]
    single = folder / "model.safetensors"
    if single.is_file():
        return [single]
    found = sorted(folder.glob("*.safetensors"))
    if not found:
        raise BsmError(
            f"training.init_from: no safetensors weights in {folder} (looked for "
            "model.safetensors.index.json, model.safetensors, *.safetensors)",
            field="training.init_from",
        )
    return found


def _names(names: list[str]) -> str:
    more = f" (+{len(names) - _SHOW} more)" if len(names) > _SHOW else ""
    return ", ".join(names[:_SHOW]) + more


def check_checkpoint(spec: ModelSpec, folder: Path) -> dict[str, Path]:
    """Key -> file for every tensor the model needs; refuses any mismatch with the names."""
    from safetensors import safe_open

    if not folder.is_dir():
        raise BsmError(f"training.init_from: {folder} is not a folder", field="training.init_from")
    want = {arch.hf_key(n): shape for n, shape in arch.param_table(spec).items()}
    have: dict[str, tuple[tuple[int, ...], Path]] = {}
    for f in _files(folder):
        with safe_open(str(f), framework="pt") as sf:
            for k in sf.keys():  # noqa: SIM118 (safe_open is not a mapping)
                have[k] = (tuple(sf.get_slice(k).get_shape()), f)
    tied_head = {"lm_head.weight"} if spec.tie_embeddings else set()
    missing = sorted(set(want) - set(have))
    extra = sorted(
        k for k in set(have) - set(want) - tied_head if not k.endswith(_IGNORED_SUFFIXES)
    )
    wrong = sorted(
        f"{k} {list(have[k][0])} (model: {list(s)})"
        for k, s in want.items()
        if k in have and have[k][0] != s
    )
    problems = []
    if missing:
        problems.append(f"missing {len(missing)}: {_names(missing)}")
    if extra:
        problems.append(f"unexpected {len(extra)}: {_names(extra)}")
    if wrong:
        problems.append(f"wrong shape {len(wrong)}: {_names(wrong)}")
    if problems:
        raise BsmError(
            f"training.init_from {folder} does not match the model {spec.name} "
            f"({spec.family}, {spec.n_layers} layers): " + "; ".join(problems),
            field="training.init_from",
            hint="model and init_from must describe the same checkpoint: take the shape from its "
            f"config.json with model: {{hf: {folder}}}",
        )
    return {k: have[k][1] for k in want}


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

    where = check_checkpoint(spec, folder)
    params = dict(model.named_parameters())
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

"""Export the trained model as its family's Hugging Face safetensors + config.json (DIR/model/).
A LoRA model's adapters are merged into its weights here (its PEFT adapter: train/peft_adapter.py).

The class, config and key names come from the architecture description (`spec.hf.to_hf_config`,
`arch.hf_key`): a model that came in as Qwen3 leaves as Qwen3.

Parameters are gathered one at a time (`DTensor.full_tensor()`, a collective every rank joins),
moved to host memory on rank 0 and written in files of at most `max_shard_bytes`, so neither a
GPU nor the host ever holds more than one file's worth of the model.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from blackwell_sm.data.tokenizer_files import copy_tokenizer
from blackwell_sm.spec import ModelSpec, arch
from blackwell_sm.spec.hf import generation_config, to_hf_config

DEFAULT_MAX_SHARD_BYTES = 5 * 1024**3
EXPORT_DTYPE = torch.float32  # the fp32 master weights: the export is exactly the trained model
BF16_FROM_PARAMS = 1_000_000_000  # `export_dtype: auto` writes bf16 from this size up


def export_dtype(spec: ModelSpec, choice: str = "auto") -> torch.dtype:
    """The dtype to write: as asked, or for `auto` bf16 for models of 1B parameters and more
    (half the bytes, the dtype they are published in) and the exact fp32 weights below."""
    if choice == "auto":
        return torch.bfloat16 if spec.n_params >= BF16_FROM_PARAMS else torch.float32
    return {"bfloat16": torch.bfloat16, "float32": torch.float32}[choice]


def write_generation_config(spec: ModelSpec, out_dir: Path, source: Path | None) -> Path:
    """generation_config.json: the source model's own (its sampling defaults) when it has one,
    else the spec's bos/eos token ids."""
    dst = out_dir / "generation_config.json"
    if source is not None and (source / "generation_config.json").is_file():
        dst.write_text((source / "generation_config.json").read_text())
    else:
        dst.write_text(json.dumps(generation_config(spec), indent=2) + "\n")
    return dst


def hf_name(name: str) -> str:
    """Our parameter name -> the Hugging Face checkpoint key (`arch.hf_key`)."""
    return arch.hf_key(name)


def hf_config(spec: ModelSpec, dtype: torch.dtype = EXPORT_DTYPE) -> dict:
    """The family's Hugging Face config dict for `spec` (`spec.hf.to_hf_config`)."""
    return to_hf_config(spec, str(dtype).removeprefix("torch."))


def export_model(
    model: nn.Module,
    spec: ModelSpec,
    out_dir: Path,
    *,
    is_main: bool,
    max_shard_bytes: int = DEFAULT_MAX_SHARD_BYTES,
    dtype: torch.dtype = EXPORT_DTYPE,
    source: Path | None = None,
    tokenizer: Path | None = None,
) -> list[Path]:
    """Write `model` (FSDP-sharded or not) to `out_dir`; collective. Returns the files written.

    Beside the weights and config.json: generation_config.json, and a tokenizer: `tokenizer`
    (the folder of the one that made the training data) when given, else the one of `source`
    (the Hugging Face folder the model was imported from) when it has one."""
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor

    from blackwell_sm.train.lora import is_adapter, merged_deltas

    # With LoRA adapters (train/lora.py) each adapted weight leaves merged: W + B A x alpha / r.
    deltas = merged_deltas(model)
    params = [(n, p) for n, p in model.named_parameters() if not is_adapter(n)]
    itemsize = torch.tensor([], dtype=dtype).element_size()
    # Plan the files from shapes alone so every file name is known before any gather.
    groups: list[list[int]] = [[]]
    size = 0
    for i, (_, p) in enumerate(params):
        nbytes = p.numel() * itemsize
        if groups[-1] and size + nbytes > max_shard_bytes:
            groups.append([])
            size = 0
        groups[-1].append(i)
        size += nbytes
    n = len(groups)
    names = (
        ["model.safetensors"]
        if n == 1
        else [f"model-{k + 1:05d}-of-{n:05d}.safetensors" for k in range(n)]
    )
    if is_main:
        out_dir.mkdir(parents=True, exist_ok=True)
    weight_map: dict[str, str] = {}
    total = 0
    written = []
    for fname, idx in zip(names, groups, strict=True):
        tensors: dict[str, torch.Tensor] = {}
        for i in idx:
            name, p = params[i]
            full = p.full_tensor() if isinstance(p, DTensor) else p
            delta = deltas[name]() if name in deltas else None  # collective, every rank
            if delta is not None:
                full = full.detach().float() + delta
            if is_main:
                # copy_ into a plain tensor also unwraps fp8/MX weight wrapper subclasses.
                t = torch.empty(full.shape, dtype=dtype, device="cpu")
                t.copy_(full.detach())
                tensors[hf_name(name)] = t
                weight_map[hf_name(name)] = fname
                total += t.numel() * t.element_size()
            del full
        if is_main:
            save_file(tensors, str(out_dir / fname), metadata={"format": "pt"})
            written.append(out_dir / fname)
    if is_main:
        (out_dir / "config.json").write_text(json.dumps(hf_config(spec, dtype), indent=2) + "\n")
        written.append(out_dir / "config.json")
        written.append(write_generation_config(spec, out_dir, source))
        if tokenizer is not None:
            written.extend(copy_tokenizer(tokenizer, out_dir))
        elif source is not None:
            written.extend(copy_tokenizer(source, out_dir))
        if n > 1:
            index = {"metadata": {"total_size": total}, "weight_map": weight_map}
            (out_dir / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
            written.append(out_dir / "model.safetensors.index.json")
    return written


def load_exported(model: nn.Module, out_dir: Path) -> None:
    """Load an export back into an unsharded `Transformer` (strict: every tensor must match)."""
    from safetensors.torch import load_file

    state = {}
    for f in sorted(out_dir.glob("*.safetensors")):
        state.update(load_file(str(f)))
    ours = {n: state[hf_name(n)] for n, _ in model.named_parameters() if hf_name(n) in state}
    missing = [n for n, _ in model.named_parameters() if n not in ours]
    extra = set(state) - {hf_name(n) for n, _ in model.named_parameters()}
    if missing or extra:
        raise ValueError(f"export mismatch: missing {missing}, unexpected {sorted(extra)}")
    model.load_state_dict(ours, strict=True)

"""PEFT adapter folders, out and in: `adapter_config.json` + `adapter_model.safetensors`.

The keys are PEFT's saved names: `base_model.model.` + the Hugging Face key of the parameter
(`base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight`; a module trained in full:
`base_model.model.model.embed_tokens.weight`), so `peft.PeftModel.from_pretrained(base, folder)`
loads the export onto the base transformers model, and an adapter PEFT saved elsewhere loads
here (`training.peft.init_adapter`) to continue training. Nothing here imports peft.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from torch import nn

from blackwell_sm.errors import BsmError
from blackwell_sm.spec import arch
from blackwell_sm.spec.peft import PeftSpec

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
PREFIX = "base_model.model."


def peft_key(name: str) -> str:
    """Our parameter name -> its key in a PEFT adapter file."""
    return PREFIX + arch.hf_key(name)


def adapter_config(peft: PeftSpec, base: str | None, hf_class: str) -> dict[str, Any]:
    """The adapter_config.json PEFT reads (its LoraConfig fields; the rest take PEFT's
    defaults)."""
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": base,
        "r": peft.rank,
        "lora_alpha": peft.alpha,
        "lora_dropout": peft.dropout,
        "target_modules": list(peft.target_modules),
        "modules_to_save": list(peft.modules_to_save) or None,
        "bias": "none",
        "fan_in_fan_out": False,
        "use_rslora": False,
        "use_dora": False,
        "init_lora_weights": True,
        "inference_mode": True,
        "auto_mapping": {"base_model_class": hf_class, "parent_library": "transformers"},
    }


def export_adapter(
    model: nn.Module,
    peft: PeftSpec,
    out_dir: Path,
    *,
    is_main: bool,
    base: str | None,
    hf_class: str,
    tokenizer: Path | None = None,
) -> list[Path]:
    """Write the trainable parameters (fp32) as a PEFT adapter in `out_dir`, with `tokenizer`'s
    files beside them (the one the data was tokenized with, so the folder serves on its own);
    collective (every rank gathers each parameter, rank 0 writes). Returns the files written."""
    from safetensors.torch import save_file
    from torch.distributed.tensor import DTensor

    tensors: dict[str, torch.Tensor] = {}
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        full = p.full_tensor() if isinstance(p, DTensor) else p
        if is_main:
            tensors[peft_key(name)] = full.detach().to("cpu", torch.float32).contiguous()
        del full
    if not is_main:
        return []
    out_dir.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(out_dir / WEIGHTS), metadata={"format": "pt"})
    cfg = adapter_config(peft, base, hf_class)
    (out_dir / CONFIG).write_text(json.dumps(cfg, indent=2) + "\n")
    written = [out_dir / WEIGHTS, out_dir / CONFIG]
    if tokenizer is not None:
        from blackwell_sm.data.tokenizer_files import copy_tokenizer

        written.extend(copy_tokenizer(tokenizer, out_dir))
    return written


def _refuse(folder: Path, why: str) -> BsmError:
    return BsmError(
        f"training.peft.init_adapter {folder}: {why}",
        hint="give a PEFT LoRA adapter folder whose r, lora_alpha and target_modules equal "
        "training.peft's",
        code="bad_adapter",
    )


def check_adapter(folder: Path, peft: PeftSpec) -> dict[str, Any]:
    """The folder's adapter_config.json, refused unless it is a LoRA adapter of `peft`'s shape."""
    if not (folder / CONFIG).is_file() or not (folder / WEIGHTS).is_file():
        raise _refuse(folder, f"expected {CONFIG} and {WEIGHTS} in it")
    cfg = json.loads((folder / CONFIG).read_text())
    targets = cfg.get("target_modules") or []
    theirs = {
        "peft_type": cfg.get("peft_type"),
        "r": cfg.get("r"),
        "lora_alpha": float(cfg.get("lora_alpha") or 0),
        "target_modules": sorted(targets) if isinstance(targets, list) else targets,
        "modules_to_save": sorted(cfg.get("modules_to_save") or []),
        "use_dora": bool(cfg.get("use_dora")),
        "use_rslora": bool(cfg.get("use_rslora")),
    }
    ours = {
        "peft_type": "LORA",
        "r": peft.rank,
        "lora_alpha": float(peft.alpha),
        "target_modules": sorted(peft.target_modules),
        "modules_to_save": sorted(peft.modules_to_save),
        "use_dora": False,
        "use_rslora": False,
    }
    diff = [f"{k} {theirs[k]!r} (training.peft: {ours[k]!r})" for k in ours if theirs[k] != ours[k]]
    if diff:
        raise _refuse(folder, "differs: " + "; ".join(diff))
    return cfg


@torch.no_grad()
def load_adapter(model: nn.Module, peft: PeftSpec, folder: Path) -> int:
    """Fill the trainable parameters from a PEFT adapter folder (each rank its own slices);
    returns the number of tensors loaded. Refuses a missing key or a shape that differs."""
    from safetensors import safe_open

    from blackwell_sm.train.hf_import import _local_region

    check_adapter(folder, peft)
    n = 0
    with safe_open(str(folder / WEIGHTS), framework="pt") as sf:
        keys = set(sf.keys())
        # PEFT files saved with an adapter name keep it: `...lora_A.default.weight`.
        alias = {k.replace(".default.", "."): k for k in keys}
        for name, p in model.named_parameters():
            if not p.requires_grad:
                continue
            key = alias.get(peft_key(name))
            if key is None:
                raise _refuse(folder, f"{WEIGHTS} has no {peft_key(name)}")
            piece = sf.get_slice(key)
            if tuple(piece.get_shape()) != tuple(p.shape):
                raise _refuse(
                    folder, f"{key} has shape {piece.get_shape()}, the model needs {list(p.shape)}"
                )
            local = p.to_local() if hasattr(p, "to_local") else p
            local.copy_(piece[_local_region(p)].to(local.dtype))
            n += 1
    return n

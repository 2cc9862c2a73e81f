"""`bsm init`'s spec text, from the templates shipped as package data (`blackwell_sm.templates`).

A template that matches the preset and task is written as it is. Any other preset (or a Hugging
Face folder) gets its task's base template retargeted: the header, `model:`, a `seq_len` the
model's context allows, its own `init_from` folder, about 20 tokens per parameter for
pre-training, and `instance_count: auto`. Comments stay; the result is checked by loading it.
"""

from __future__ import annotations

import re
from importlib.resources import files
from pathlib import Path
from typing import Literal

from blackwell_sm.errors import SpecError

Task = Literal["pretrain", "finetune"]
TASKS: tuple[Task, ...] = ("pretrain", "finetune")
#: The template each task's specs are made from when no template names the model.
BASE: dict[str, str] = {"pretrain": "llama-3.1-8b", "finetune": "qwen3-8b-finetune"}
DEFAULT_TARGET = "llama-3.1-8b"
#: What `bsm init` calls its argument in errors (click's metavar).
ARG = "PRESET|HF-DIR"
TOKENS_PER_PARAM = 20


def template_names() -> list[str]:
    """The shipped templates' names (file stems), sorted."""
    folder = files("blackwell_sm.templates")
    return sorted(
        p.name.removesuffix(".yaml") for p in folder.iterdir() if p.name.endswith(".yaml")
    )


def template_text(name: str) -> str:
    """The text of the shipped template `name`."""
    return (files("blackwell_sm.templates") / f"{name}.yaml").read_text(encoding="utf-8")


def _model_and_task(text: str) -> tuple[str, str]:
    """A template's `model:` (a preset name) and `training.task` (pretrain unless set)."""
    model = re.search(r"^model: *([\w.\-]+) *$", text, re.M)
    task = re.search(r"^  task: *(\w+)", text, re.M)
    return (model.group(1) if model else "", task.group(1) if task else "pretrain")


def _matching_template(preset: str, task: str) -> str | None:
    """The shipped template for `preset` and `task`, the shortest name first (the plain one
    before its long-context variants), or None."""
    hits = [n for n in template_names() if _model_and_task(template_text(n)) == (preset, task)]
    return min(hits, key=len) if hits else None


def starter_spec(target: str | None = None, task: Task | None = None) -> tuple[str, str]:
    """(spec text, where it came from) for `bsm init TARGET --task TASK`. TARGET is a template
    name, a preset name or a Hugging Face folder (or its config.json); SpecError naming the
    argument (or --task) for anything else."""
    from blackwell_sm.spec.presets import PRESETS

    target = target or DEFAULT_TARGET
    names = template_names()
    if target in names and target not in PRESETS:
        model_name, has = _model_and_task(template_text(target))
        if task is not None and task != has:
            raise SpecError(
                f"template {target!r} is a {has} spec, not {task}",
                field="--task",
                hint=f"bsm init {model_name} --task {task}",
            )
        return template_text(target), f"template {target}"
    if target in PRESETS:
        model = PRESETS[target]
        name = _matching_template(target, task or "pretrain")
        if name is not None:
            return template_text(name), f"template {name}"
        return _retarget(
            task or "pretrain", target, target, model.max_seq_len, model.n_params
        ), f"preset {target}"
    path = Path(target).expanduser()
    if path.exists() or "/" in target or target.startswith("."):
        return _from_hf(target, path, task or "pretrain")
    from blackwell_sm.spec.suggest import did_you_mean

    raise SpecError(
        f"{target!r} is neither a model preset, a template nor a Hugging Face folder; presets: "
        f"{', '.join(PRESETS)}; templates: {', '.join(n for n in names if n not in PRESETS)}",
        field=ARG,
        hint=did_you_mean(target, [*PRESETS, *names]) or "bsm presets lists the presets",
    )


def _from_hf(target: str, path: Path, task: str) -> tuple[str, str]:
    """The base template retargeted to the model in a Hugging Face folder (its config.json
    read and checked now, so a folder the toolkit cannot train is refused here)."""
    from blackwell_sm.spec.hf import from_hf_config, read_hf_config
    from blackwell_sm.spec.model import ModelSpec

    if not path.exists():
        raise SpecError(
            f"{target}: no such folder (HF-DIR is a Hugging Face model folder with config.json)",
            field=ARG,
            hint="bsm presets lists the presets, which need no folder",
        )
    try:
        cfg, where = read_hf_config(path)
        shape = ModelSpec(name=where.parent.name or "hf", **from_hf_config(cfg, str(where)))
    except SpecError as e:
        e.field = ARG
        raise
    shown = target if not target.endswith("config.json") else str(Path(target).parent)
    model_line = "model: {hf: " + _yaml_str(shown) + "}"
    return _retarget(
        task, model_line, shape.name, shape.max_seq_len, shape.n_params, hf_dir=shown
    ), f"Hugging Face config {where}"


def _yaml_str(s: str) -> str:
    """`s` as a YAML flow scalar: plain when safe, else double-quoted."""
    if re.fullmatch(r"[\w./~\-]+", s) and not s.startswith(("-", "~")):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _retarget(
    task: str,
    model: str,
    name: str,
    max_seq_len: int,
    n_params: int,
    *,
    hf_dir: str | None = None,
) -> str:
    """The task's base template for another model: `model` is a preset name or a whole
    `model: ...` line."""
    base = BASE[task]
    lines = template_text(base).splitlines()
    body = lines[next(i for i, ln in enumerate(lines) if not ln.startswith("#")) :]
    text = "\n".join(body) + "\n"
    text = re.sub(
        r"^model: .*$",
        model if model.startswith("model:") else f"model: {model}",
        text,
        count=1,
        flags=re.M,
    )
    text = re.sub(
        r"^(  seq_len: *)(\d+)",
        lambda m: m.group(1) + str(min(int(m.group(2)), max_seq_len)),
        text,
        count=1,
        flags=re.M,
    )
    text = re.sub(r"^(  instance_count: *)\S+", r"\1auto", text, count=1, flags=re.M)
    folder = Path(hf_dir).name if hf_dir else name
    text = re.sub(r"(init_from: s3://REPLACE-ME-bucket/hf/)[^/\s]+/", rf"\g<1>{folder}/", text)
    tokens = max(1, round(TOKENS_PER_PARAM * n_params / 1e9)) * 10**9
    text = re.sub(
        r"^(  total_tokens: *)\d+",
        rf"\g<1>{tokens}   # ~{TOKENS_PER_PARAM} per parameter",
        text,
        count=1,
        flags=re.M,
    )
    return _header(task, name, base, folder, hf_dir) + text


def _header(task: str, name: str, base: str, folder: str, hf_dir: str | None) -> str:
    """The comment block of a retargeted spec: what it is and what to do before submitting."""
    lines = [
        f"# {name} ({task}) on ml.p6-b200.48xlarge,",
        f"# written by `bsm init` from the {base} template.",
    ]
    if task == "finetune":
        if hf_dir is None:
            lines.append(f"#   hf download <its Hugging Face repo> --local-dir {folder}")
        lines += [
            f"#   aws s3 sync {hf_dir or folder} s3://REPLACE-ME-bucket/hf/{folder}/",
            f"#   bsm data prepare chat.jsonl --out sft --format chat --tokenizer {hf_dir or folder} "
            "--seq-len 4096",
            "#   aws s3 sync sft s3://REPLACE-ME-bucket/blackwell-sm/data/sft/",
            "# Set data.sequences to the manifest's `sequences`.",
        ]
    lines += [
        "# `bsm plan` on this file shows the chosen settings (instance_count auto: the fewest",
        "# instances within the deadline); replace every REPLACE-ME value before",
        "# `bsm submit` (`bsm iam-policy` on this file prints the role's policy).",
    ]
    return "\n".join(lines) + "\n"

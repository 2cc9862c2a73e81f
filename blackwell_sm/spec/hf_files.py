"""A Hugging Face model folder's files checked against the model, without reading the weights.

One check for both sides: the client runs it on `model: {hf: FOLDER}` and a local
`training.init_from` before anything is planned or paid for (`bsm plan`, `bsm submit`, dry runs
included), and the container repeats it before step 0 (`train/hf_import.py`).

- the weight files: `model.safetensors.index.json` (its `weight_map`: plain file names in the
  folder, each present; `metadata.total_size` if given), else `model.safetensors`, else every
  `*.safetensors`; at most `MAX_WEIGHT_FILES`; a `*.safetensors` the index does not list refused;
- each file's header (`spec/safetensors_header.py`): its own consistency and its size;
- every tensor against the architecture (`arch.param_table` + `arch.hf_key`): missing, unexpected,
  wrong-shaped, in a dtype weights are not stored in, or in another file than the index says;
- the tokenizer (`tokenizer.json`, when the folder has one): its largest token id below the
  model's `vocab_size`.

Each failure is a SpecError (exit 2) naming the file, the tensor or the token, with `field` the
spec field that named the folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blackwell_sm.errors import SpecError
from blackwell_sm.spec import arch
from blackwell_sm.spec.safetensors_header import WEIGHT_DTYPES, TensorInfo, read_header

INDEX_FILE = "model.safetensors.index.json"
MAX_INDEX_BYTES = 64 << 20
MAX_WEIGHT_FILES = 4096  # a 70B model in 5 GB shards has 30
MAX_TOKENIZER_BYTES = 128 << 20
#: Tensors some checkpoints carry that the model does not need (old RoPE buffers).
IGNORED_SUFFIXES = (".rotary_emb.inv_freq",)
_SHOW = 8  # names listed per kind of mismatch


def _names(names: list[str]) -> str:
    more = f" (+{len(names) - _SHOW} more)" if len(names) > _SHOW else ""
    return ", ".join(names[:_SHOW]) + more


def _plain(name: Any) -> bool:
    return (
        isinstance(name, str)
        and bool(name)
        and "/" not in name
        and "\\" not in name
        and (name not in (".", ".."))
    )


def _index(folder: Path, field: str) -> tuple[dict[str, str], int | None]:
    """The index's weight_map (tensor -> file) and metadata.total_size, both checked."""
    from blackwell_sm.safe_load import load_mapping

    path = folder / INDEX_FILE
    data = load_mapping(
        path, field=field, fmt="json", max_bytes=MAX_INDEX_BYTES, label="safetensors index"
    )
    wm = data.get("weight_map")
    if not isinstance(wm, dict) or not wm:
        raise SpecError(
            f"{path}: weight_map: expected a non-empty mapping of tensor -> file", field=field
        )
    bad = [f"{k}: {v!r}" for k, v in wm.items() if not _plain(v)]
    if bad:
        raise SpecError(
            f"{path}: weight_map.{bad[0]} is not a file name in the folder", field=field
        )
    meta = data.get("metadata") or {}
    total = meta.get("total_size") if isinstance(meta, dict) else None
    if total is not None and (type(total) is not int or total < 0):
        raise SpecError(f"{path}: metadata.total_size: {total!r} is not a byte count", field=field)
    return wm, total


def weight_files(folder: Path, field: str) -> tuple[list[Path], dict[str, str] | None, int | None]:
    """(the weight files, the index's weight_map or None, its total_size or None)."""
    if not folder.is_dir():
        what = "is not a folder" if folder.exists() else "does not exist"
        raise SpecError(f"{field}: {folder} {what}", field=field)
    found = sorted(p for p in folder.glob("*.safetensors"))
    if (folder / INDEX_FILE).exists():
        wm, total = _index(folder, field)
        files = [folder / f for f in sorted(set(wm.values()))]
        missing = [p.name for p in files if not p.is_file()]
        if missing:
            raise SpecError(
                f"{folder / INDEX_FILE} lists {len(missing)} weight file(s) that are "
                f"missing: {_names(missing)}",
                field=field,
            )
        stale = [p.name for p in found if p not in files]
        if stale:
            raise SpecError(
                f"{folder}: {_names(stale)} not listed in {INDEX_FILE} (a file of "
                "another checkpoint?)",
                field=field,
            )
    else:
        wm, total = None, None
        files = (
            [folder / "model.safetensors"] if (folder / "model.safetensors").is_file() else found
        )
    if not files:
        raise SpecError(
            f"{field}: no safetensors weights in {folder} (looked for {INDEX_FILE}, "
            "model.safetensors, *.safetensors)",
            field=field,
        )
    if len(files) > MAX_WEIGHT_FILES:
        raise SpecError(
            f"{folder}: {len(files)} weight files (at most {MAX_WEIGHT_FILES})", field=field
        )
    return files, wm, total


def read_tensors(folder: Path, field: str) -> dict[str, tuple[TensorInfo, Path]]:
    """Every tensor in the folder's weight files (headers only), by name, with its file."""
    files, wm, total = weight_files(folder, field)
    have: dict[str, tuple[TensorInfo, Path]] = {}
    for f in files:
        for name, t in read_header(f, field=field).items():
            if name in have:
                raise SpecError(
                    f"{folder}: tensor {name} is in both {have[name][1].name} and {f.name}",
                    field=field,
                )
            if wm is not None and wm.get(name) != f.name:
                raise SpecError(
                    f"{f}: tensor {name} is here, but {INDEX_FILE} says "
                    f"{wm.get(name) or 'nothing of it'}",
                    field=field,
                )
            have[name] = (t, f)
    if wm is not None:
        unlisted = sorted(set(wm) - set(have))
        if unlisted:
            raise SpecError(
                f"{folder / INDEX_FILE} lists {len(unlisted)} tensor(s) no file "
                f"holds: {_names(unlisted)}",
                field=field,
            )
    stored = sum(t.end - t.begin for t, _ in have.values())
    if total is not None and total != stored:
        raise SpecError(
            f"{folder / INDEX_FILE}: metadata.total_size is {total:,} bytes, the "
            f"files' tensors hold {stored:,}",
            field=field,
        )
    return have


def check_weights(spec: Any, folder: str | Path, *, field: str) -> dict[str, Path]:
    """Key -> file for every tensor the model needs; SpecError naming every kind of mismatch."""
    folder = Path(folder).expanduser()
    have = read_tensors(folder, field)
    want = {arch.hf_key(n): shape for n, shape in arch.param_table(spec).items()}
    tied_head = {"lm_head.weight"} if spec.tie_embeddings else set()
    missing = sorted(set(want) - set(have))
    extra = sorted(k for k in set(have) - set(want) - tied_head if not k.endswith(IGNORED_SUFFIXES))
    wrong = sorted(
        f"{k} {list(have[k][0].shape)} (model: {list(s)})"
        for k, s in want.items()
        if k in have and have[k][0].shape != s
    )
    dtypes = sorted(
        f"{k} {have[k][0].dtype}"
        for k in want
        if k in have and have[k][0].dtype not in WEIGHT_DTYPES
    )
    problems = []
    for what, names in (
        ("missing", missing),
        ("unexpected", extra),
        ("wrong shape", wrong),
        (f"dtype not one of {', '.join(WEIGHT_DTYPES)}", dtypes),
    ):
        if names:
            problems.append(f"{what} {len(names)}: {_names(names)}")
    if problems:
        raise SpecError(
            f"{field} {folder} does not match the model {spec.name} ({spec.family}, "
            f"{spec.n_layers} layers): " + "; ".join(problems),
            field=field,
            hint="model and weights must describe the same checkpoint: take the shape from its "
            f"config.json with model: {{hf: {folder}}}",
        )
    return {k: have[k][1] for k in want}


def _largest_id(data: dict[str, Any], path: Path, field: str) -> tuple[int, str]:
    """(largest token id, its token) in a tokenizer.json's model vocabulary and added tokens."""
    model = data.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    best: tuple[int, str] = (-1, "")
    if isinstance(vocab, dict):
        for tok, i in vocab.items():
            if type(i) is not int or i < 0:
                raise SpecError(
                    f"{path}: model.vocab.{tok}: id {i!r} is not a token id", field=field
                )
            best = max(best, (i, tok))
    elif isinstance(vocab, list) and vocab:  # Unigram: [[piece, score], ...], ids: positions
        best = (len(vocab) - 1, str(vocab[-1][0] if isinstance(vocab[-1], list) else ""))
    added = data.get("added_tokens") or []
    if not isinstance(added, list):
        raise SpecError(f"{path}: added_tokens: expected a list", field=field)
    for n, t in enumerate(added):
        i = t.get("id") if isinstance(t, dict) else None
        if type(i) is not int or i < 0:
            raise SpecError(f"{path}: added_tokens.{n}.id: {i!r} is not a token id", field=field)
        best = max(best, (i, str(t.get("content", ""))))
    return best


def check_tokenizer(folder: Path, vocab_size: int, *, field: str) -> None:
    """The folder's tokenizer.json (if any) has no token id at or above `vocab_size`."""
    from blackwell_sm.safe_load import parse_json, read_text

    path = folder / "tokenizer.json"
    if not path.exists():
        return
    text = read_text(path, field=field, max_bytes=MAX_TOKENIZER_BYTES, label="tokenizer")
    data = parse_json(text, name=str(path), field=field)
    if not isinstance(data, dict):
        raise SpecError(f"{path}: expected a JSON object", field=field)
    top, token = _largest_id(data, path, field)
    if top >= vocab_size:
        raise SpecError(
            f"{path}: token {token!r} has id {top}, not below the model's vocab_size "
            f"{vocab_size} (config.json vocab_size)",
            field=field,
            hint="the tokenizer and config.json come from different models; use the pair that "
            "was published together",
        )


def check_model_folder(spec: Any, folder: str | Path, *, field: str) -> None:
    """A `model: {hf: ...}` folder: its tokenizer against the vocabulary, and its weights
    against the architecture when it holds any (a config-only folder is fine)."""
    folder = Path(folder).expanduser()
    if not folder.is_dir():
        return  # model.hf named config.json itself: no weights beside it to check
    check_tokenizer(folder, spec.vocab_size, field=field)
    if any(folder.glob("*.safetensors")) or (folder / INDEX_FILE).exists():
        check_weights(spec, folder, field=field)


def check_init_from(spec: Any) -> None:
    """A local `training.init_from` against the model (an s3:// one is checked by the job)."""
    init = spec.training.init_from
    if init and not init.startswith("s3://"):
        folder = Path(init).expanduser()
        check_weights(spec.model, folder, field="training.init_from")
        check_tokenizer(folder, spec.model.vocab_size, field="training.init_from")

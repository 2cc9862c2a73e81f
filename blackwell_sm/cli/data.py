"""`bsm data prepare`: tokenize text or JSONL into token shards for the `train` channel."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, info


@click.group()
def data() -> None:
    """Prepare training data (token shards) from text or JSONL."""


@data.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(path_type=Path))
@click.option(
    "--out",
    "out_dir",
    required=True,
    type=click.Path(path_type=Path),
    help="Directory for shard-NNNNN.bin and manifest.json (upload it as the channel); "
    "written beside it and renamed into place when complete.",
)
@click.option(
    "--overwrite",
    is_flag=True,
    help="Replace a non-empty --out (the old folder goes only once the new one is complete).",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    default=None,
    help="text: a Hugging Face tokenizer.json or a folder with one (default: the built-in "
    "byte-level tokenizer); "
    "chat / prompt-completion: a Hugging Face tokenizer folder (with its chat template).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["text", "chat", "prompt-completion"]),
    default="text",
    show_default=True,
    help="text: documents for pretraining; chat: JSONL `messages` (the loss counts the "
    "assistant turns); prompt-completion: JSONL `prompt`/`completion` (the completion counts).",
)
@click.option(
    "--seq-len",
    type=click.IntRange(min=2),
    default=None,
    help="chat / prompt-completion: the row length samples are packed to (= training.seq_len).",
)
@click.option(
    "--packing",
    type=click.Choice(["pack", "pad"]),
    default="pack",
    show_default=True,
    help="chat / prompt-completion: pack samples into rows (attention kept within each), or "
    "pad one sample per row.",
)
@click.option(
    "--shard-tokens",
    type=click.IntRange(min=1024),
    default=256 * 1024 * 1024,
    show_default=True,
    help="Tokens per shard file.",
)
@OUTPUT_OPTION
def prepare(
    inputs: tuple[Path, ...],
    out_dir: Path,
    overwrite: bool,
    tokenizer: Path | None,
    fmt: str,
    seq_len: int | None,
    packing: str,
    shard_tokens: int,
    output: str,
) -> None:
    """Tokenize INPUT files (.txt: one document each; .jsonl: a `text` field per line, or
    fine-tuning samples with --format chat|prompt-completion)."""
    if fmt != "text":
        _prepare_finetune(
            inputs, out_dir, tokenizer, fmt, seq_len, packing, shard_tokens, output, overwrite
        )
        return
    from blackwell_sm.data.prepare import prepare as run_prepare

    if tokenizer is None:  # said in text and JSON mode alike (stderr): never a silent choice
        info(
            "note: no --tokenizer: the built-in byte-level tokenizer (ids are the UTF-8 bytes, "
            "vocab 256); a model started from pretrained weights (training.init_from) needs "
            "its own: --tokenizer DIR (run-local and submit refuse the mismatch)"
        )
    manifest = run_prepare(
        list(inputs), out_dir, tokenizer=tokenizer, shard_tokens=shard_tokens, overwrite=overwrite
    )
    if output == "json":
        emit_json(manifest)
        return
    info(
        f"{manifest.documents} documents, {manifest.tokens:,} tokens ({manifest.tokenizer}, "
        f"vocab {manifest.vocab_size}, {manifest.dtype}) in {len(manifest.shards)} shard(s) "
        f"under {out_dir}"
    )
    info(f"set model.vocab_size >= {manifest.vocab_size}; use {out_dir} as the train channel")


def _prepare_finetune(
    inputs, out_dir, tokenizer, fmt, seq_len, packing, shard_tokens, output, overwrite
):
    from blackwell_sm.data.finetune import prepare_finetune
    from blackwell_sm.errors import SpecError

    if tokenizer is None or seq_len is None:
        missing = "--tokenizer" if tokenizer is None else "--seq-len"
        raise SpecError(f"--format {fmt} needs {missing}", field=missing)
    m = prepare_finetune(
        list(inputs),
        out_dir,
        fmt=fmt,
        tokenizer=tokenizer,
        seq_len=seq_len,
        packing=packing,
        shard_tokens=shard_tokens,
        overwrite=overwrite,
        notify=info,
    )
    if output == "json":
        emit_json(m)
        return
    info(
        f"{m.samples} samples ({m.truncated} cut to {m.seq_len} tokens, {m.dropped} without a "
        f"token to learn from dropped) in {m.sequences} rows of {m.seq_len} ({m.packing}), "
        f"{m.loss_tokens:,} loss tokens, {len(m.shards)} shard(s) under {out_dir}"
    )
    info(
        f"set training.seq_len: {m.seq_len}, training.task: finetune, and for epochs "
        f"training.data.sequences: {m.sequences}; use {out_dir} as the train channel"
    )


@data.command()
@click.argument("directory", type=click.Path(path_type=Path))
@click.option(
    "--vocab-size",
    type=click.IntRange(min=1),
    default=None,
    help="Also check every token id is below this (the model's vocab_size).",
)
@click.option(
    "--no-sha256",
    is_flag=True,
    help="Skip the hashes (the checks the container makes when it opens the channel).",
)
@OUTPUT_OPTION
def verify(directory: Path, vocab_size: int | None, no_sha256: bool, output: str) -> None:
    """Check a prepared folder: every shard listed in its manifest and no other, sizes, headers,
    the sha256 of every shard (about 1 GB/s per core) and, with --vocab-size, every token id; for
    fine-tuning rows also the manifest's seq_len, sequences and loss_tokens against the shards.
    Corrupt data is exit 2 naming the file."""
    from blackwell_sm.data.channel import open_channel
    from blackwell_sm.data.manifest import FinetuneManifest

    ch = open_channel(directory, vocab_size=vocab_size, verify_sha256=not no_sha256)
    tokens = sum(len(s.tokens) for s in ch.shards)
    result: dict[str, Any] = {
        "directory": str(directory),
        "manifest_version": ch.manifest.manifest_version if ch.manifest else None,
        "shards": len(ch.shards),
        "tokens": tokens,
        "sha256_checked": not no_sha256 and ch.manifest is not None,
        "vocab_size_checked": vocab_size,
        "tokenizer_dir": str(ch.tokenizer_dir) if ch.tokenizer_dir else None,
        "finetune_checked": None,
    }
    if isinstance(ch.manifest, FinetuneManifest):
        m = ch.manifest
        result["finetune_checked"] = {
            "format": m.data_format,
            "seq_len": m.seq_len,
            "sequences": m.sequences,
            "loss_tokens": m.loss_tokens if not no_sha256 else None,
        }
    if output == "json":
        emit_json(result)
        return
    checked = ["sizes", "headers"]
    if result["sha256_checked"]:
        checked.append("sha256")
    if vocab_size is not None:
        checked.append(f"token ids < {vocab_size}")
    if result["finetune_checked"]:
        checked.append("rows of seq_len, sequences" + ("" if no_sha256 else ", loss_tokens"))
    if ch.manifest is None:
        info(f"{directory}: no manifest.json: every *.bin read in name order, unlisted")
    info(f"{len(ch.shards)} shard(s), {tokens:,} tokens: {', '.join(checked)} OK")

"""`bsm data prepare`: tokenize text or JSONL into token shards for the `train` channel."""

from __future__ import annotations

from pathlib import Path

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
    help="Directory for shard-NNNNN.bin and manifest.json (upload it as the channel).",
)
@click.option(
    "--tokenizer",
    type=click.Path(path_type=Path),
    default=None,
    help="text: a Hugging Face tokenizer.json (default: the built-in byte-level tokenizer); "
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
def prepare(inputs: tuple[Path, ...], out_dir: Path, tokenizer: Path | None, fmt: str,
            seq_len: int | None, packing: str, shard_tokens: int, output: str) -> None:  # fmt: skip
    """Tokenize INPUT files (.txt: one document each; .jsonl: a `text` field per line, or
    fine-tuning samples with --format chat|prompt-completion)."""
    if fmt != "text":
        _prepare_finetune(inputs, out_dir, tokenizer, fmt, seq_len, packing, shard_tokens, output)
        return
    from blackwell_sm.data.prepare import prepare as run_prepare

    manifest = run_prepare(list(inputs), out_dir, tokenizer=tokenizer, shard_tokens=shard_tokens)
    if output == "json":
        emit_json(manifest)
        return
    info(
        f"{manifest.documents} documents, {manifest.tokens:,} tokens ({manifest.tokenizer}, "
        f"vocab {manifest.vocab_size}, {manifest.dtype}) in {len(manifest.shards)} shard(s) "
        f"under {out_dir}"
    )
    info(f"set model.vocab_size >= {manifest.vocab_size}; use {out_dir} as the train channel")


def _prepare_finetune(inputs, out_dir, tokenizer, fmt, seq_len, packing, shard_tokens, output):
    from blackwell_sm.data.finetune import prepare_finetune
    from blackwell_sm.errors import SpecError

    if tokenizer is None or seq_len is None:
        missing = "--tokenizer" if tokenizer is None else "--seq-len"
        raise SpecError(f"--format {fmt} needs {missing}", field=missing)
    m = prepare_finetune(list(inputs), out_dir, fmt=fmt, tokenizer=tokenizer, seq_len=seq_len,
                         packing=packing, shard_tokens=shard_tokens)  # fmt: skip
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

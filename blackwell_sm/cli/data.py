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
    help="A Hugging Face tokenizer.json; default: the built-in byte-level tokenizer.",
)
@click.option(
    "--shard-tokens",
    type=click.IntRange(min=1024),
    default=256 * 1024 * 1024,
    show_default=True,
    help="Tokens per shard file.",
)
@OUTPUT_OPTION
def prepare(inputs: tuple[Path, ...], out_dir: Path, tokenizer: Path | None, shard_tokens: int,
            output: str) -> None:  # fmt: skip
    """Tokenize INPUT files (.txt: one document each; .jsonl: a `text` field per line)."""
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

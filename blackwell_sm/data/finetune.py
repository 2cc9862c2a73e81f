"""`bsm data prepare --format chat|prompt-completion`: fine-tuning samples -> packed rows (v2).

Input: JSONL, one sample per line: `{"messages": [{"role": ..., "content": ...}, ...]}` (chat,
rendered with the tokenizer's chat template) or `{"prompt": ..., "completion": ...}`. The loss
counts the assistant turns (chat) or the completion and its end token (prompt-completion); the
rest is prompt, masked out.

Samples are packed, in order, into rows of exactly `seq_len` tokens (a sample never crosses a
row; the rest of a row is padding), or padded one per row (`packing: pad`). Each token carries
flags (shard format v2): LOSS (it counts as a target) and START (it begins a sample or a padding
run, so attention never crosses into it: the loop's block-diagonal mask). A sample longer than
seq_len is cut to it (counted in the manifest); one with no loss token left is dropped.

numpy, and transformers' tokenizer inside the functions that need it: no torch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal, NamedTuple, cast

import numpy as np

from blackwell_sm.atomic_write import write_text
from blackwell_sm.data.inputs import check_inputs, check_regular, check_text, jsonl_records
from blackwell_sm.data.manifest import (
    FINETUNE_FORMAT_NAME,
    MANIFEST_FILE,
    MANIFEST_VERSION,
    FinetuneManifest,
    ShardInfo,
    TokenDtype,
)
from blackwell_sm.data.prepare import DEFAULT_SHARD_TOKENS, TOKENIZER_DIR, shard_info
from blackwell_sm.data.shards import FLAG_LOSS, FLAG_START, ShardWriter, token_dtype
from blackwell_sm.data.staging import check_out, staged_dir
from blackwell_sm.data.tokenizer_files import tokenizer_files, tokenizer_sha256
from blackwell_sm.errors import MissingExtraError, SpecError
from blackwell_sm.output_place import read_files

FORMAT_NAME = FINETUNE_FORMAT_NAME
Format = Literal["chat", "prompt-completion"]


#: The chat roles a sample may use (the templates' own: anything else would become prompt text).
ROLES = ("system", "user", "assistant", "tool")
_NAMED = 5  # samples named in a note before "and N more"


class Sample(NamedTuple):
    tokens: list[int]
    loss: list[int]  # 1 where the token counts as a target
    where: str = ""  # file:line it came from


def load_tokenizer(path: Path):
    """A Hugging Face tokenizer folder (tokenizer.json, tokenizer_config.json, chat template), or
    a file in one (its folder is read)."""
    path = Path(path)
    if not path.is_dir():
        check_regular(path, field="--tokenizer", what="tokenizer")  # never /dev/zero
        path = path.parent
    for f in tokenizer_files(path):
        check_regular(f, field="--tokenizer", what="tokenizer file")
    try:
        from transformers import AutoTokenizer
    except ImportError as e:
        raise MissingExtraError(e.name or "transformers", "--format chat|prompt-completion") from e
    try:
        return AutoTokenizer.from_pretrained(str(path))
    except Exception as e:  # transformers raises many kinds on a bad folder
        raise SpecError(f"cannot load a tokenizer from {path}: {e}", field="--tokenizer") from e


def _ids(x: Any) -> list[int]:
    return list(x["input_ids"] if isinstance(x, dict) or hasattr(x, "keys") else x)


def chat_sample(tok, messages: list[dict[str, str]], where: str) -> Sample:
    """The conversation through the chat template; the assistant turns count, nothing else.

    Each assistant turn's tokens are those between the conversation rendered up to it (with the
    generation prompt) and up to its end; the template must render turns as prefixes of the
    whole conversation, which is checked.
    """
    if not getattr(tok, "chat_template", None):
        raise SpecError(f"{where}: the tokenizer has no chat template", field="--tokenizer")
    full = _ids(tok.apply_chat_template(messages, tokenize=True, return_dict=False))
    loss = [0] * len(full)
    for i, m in enumerate(messages):
        if m.get("role") != "assistant":
            continue
        start = _ids(
            tok.apply_chat_template(
                messages[:i], tokenize=True, add_generation_prompt=True, return_dict=False
            )
        )
        end = _ids(tok.apply_chat_template(messages[: i + 1], tokenize=True, return_dict=False))
        if end[: len(start)] != start or full[: len(end)] != end:
            raise SpecError(
                f"{where}: the chat template does not render turn {i} as a prefix of the "
                "conversation, so its tokens cannot be told from the prompt's",
                field="INPUT",
            )
        loss[len(start) : len(end)] = [1] * (len(end) - len(start))
    return Sample(full, loss)


def prompt_completion_sample(tok, prompt: str, completion: str) -> Sample:
    """prompt (with the tokenizer's special tokens) + completion + end token; the completion
    and its end token count."""
    p = _ids(tok(prompt, add_special_tokens=True))
    c = _ids(tok(completion, add_special_tokens=False))
    if tok.eos_token_id is not None:
        c.append(tok.eos_token_id)
    return Sample(p + c, [0] * len(p) + [1] * len(c))


def _chat_record(where: str, obj: dict[str, Any]) -> list[dict[str, str]]:
    msgs: Any = obj.get("messages")  # JSON, checked below
    ok = (
        isinstance(msgs, list)
        and msgs
        and all(
            isinstance(m, dict)
            and isinstance(m.get("role"), str)
            and isinstance(m.get("content"), str)
            for m in msgs
        )
    )
    if not ok:
        raise SpecError(
            f"{where}: --format chat needs 'messages': a list of {{role: str, content: str}}",
            field="INPUT",
        )
    for i, m in enumerate(msgs):
        if m["role"] not in ROLES:
            raise SpecError(
                f"{where}: messages.{i}.role {m['role']!r} is not one of {', '.join(ROLES)}",
                field="INPUT",
                hint="an unknown role would be rendered as prompt text",
            )
        extra = sorted(set(m) - {"role", "content"})
        if extra:
            raise SpecError(
                f"{where}: messages.{i}: unknown key(s) {', '.join(extra)}; a "
                "message has role and content",
                field="INPUT",
            )
        check_text(f"{where}: messages.{i}.content", m["content"])
    if not any(m["role"] == "assistant" for m in msgs):
        raise SpecError(f"{where}: no assistant turn to learn from", field="INPUT")
    return msgs


def iter_records(path: Path, fmt: Format) -> Iterator[tuple[str, Any]]:
    """(`file:line`, messages or (prompt, completion)) for each sample of a JSONL file, each
    checked without a tokenizer (`data/inputs.py` for the bytes and the JSON)."""
    for where, obj in jsonl_records(path):
        if fmt == "chat":
            yield where, _chat_record(where, obj)
            continue
        if not (isinstance(obj.get("prompt"), str) and isinstance(obj.get("completion"), str)):
            raise SpecError(
                f"{where}: --format prompt-completion needs string fields 'prompt' "
                "and 'completion'",
                field="INPUT",
            )
        yield where, (check_text(where, obj["prompt"]), check_text(where, obj["completion"]))


def iter_samples(path: Path, fmt: Format, tok) -> Iterator[Sample]:
    """The samples of a JSONL file, each checked (the line number in every error)."""
    for where, rec in iter_records(path, fmt):
        s = chat_sample(tok, rec, where) if fmt == "chat" else prompt_completion_sample(tok, *rec)
        yield s._replace(where=where)


class PackStats(NamedTuple):
    rows: int
    samples: int
    truncated: int
    dropped: int
    loss_tokens: int


def iter_rows(
    samples: Iterator[Sample],
    seq_len: int,
    pad_id: int,
    packing: str,
    counts: dict[str, int],
    cut: list[str] | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(tokens, flags) of each row of exactly `seq_len` tokens, one at a time (a row and a
    sample in memory, however long); `counts` gets samples, truncated, dropped, loss_tokens;
    `cut` collects where each sample cut to seq_len came from (and its length)."""
    for k in ("rows", "samples", "truncated", "dropped", "loss_tokens"):
        counts[k] = 0
    tokens: list[int] = []
    flags: list[int] = []

    def row_done() -> tuple[np.ndarray, np.ndarray]:
        if len(tokens) < seq_len:  # the rest of the row is padding, its own document
            flags.extend([FLAG_START] + [0] * (seq_len - len(tokens) - 1))
            tokens.extend([pad_id] * (seq_len - len(tokens)))
        row = np.asarray(tokens, dtype=np.int64), np.asarray(flags, dtype=np.uint8)
        tokens.clear()
        flags.clear()
        counts["rows"] += 1
        return row

    for s in samples:
        toks, loss = s.tokens, s.loss
        if len(toks) > seq_len:
            toks, loss = toks[:seq_len], loss[:seq_len]
            counts["truncated"] += 1
        if not any(loss[1:]):  # the first token is never a target
            counts["dropped"] += 1
            if cut is not None and s.where:
                cut.append(f"{s.where} ({len(s.tokens)} tokens: dropped, nothing left to learn)")
            continue
        if cut is not None and s.where and len(s.tokens) > seq_len:
            cut.append(f"{s.where} ({len(s.tokens)} tokens)")
        if tokens and (packing == "pad" or len(tokens) + len(toks) > seq_len):
            yield row_done()
        tokens.extend(toks)
        flags.extend(
            (FLAG_START if i == 0 else 0) | (FLAG_LOSS if (loss[i] and i) else 0)
            for i in range(len(toks))
        )
        counts["loss_tokens"] += sum(loss[1:])
        counts["samples"] += 1
        if len(tokens) == seq_len:
            yield row_done()
    if tokens:
        yield row_done()


def pack_rows(
    samples: Iterator[Sample], seq_len: int, pad_id: int, packing: str = "pack"
) -> tuple[np.ndarray, np.ndarray, PackStats]:
    """(tokens, flags) of rows of exactly `seq_len` tokens, one after another, and the counts."""
    counts: dict[str, int] = {}
    rows = list(iter_rows(samples, seq_len, pad_id, packing, counts))
    tokens = np.concatenate([t for t, _ in rows]) if rows else np.zeros(0, np.int64)
    flags = np.concatenate([f for _, f in rows]) if rows else np.zeros(0, np.uint8)
    return tokens, flags, PackStats(**counts)


def _close_shard(writer: ShardWriter, pad: int):
    """One padding token after the last row (a row is read with the next token as its last
    target, never counted: it starts a new sample), then the shard is complete."""
    writer.append(np.asarray([pad]), np.asarray([FLAG_START], dtype=np.uint8))
    writer.__exit__(None, None, None)
    return shard_info(writer.path, writer.count)


def _listed(where: list[str]) -> str:
    more = f" and {len(where) - _NAMED} more" if len(where) > _NAMED else ""
    return ", ".join(where[:_NAMED]) + more


def prepare_finetune(
    inputs: list[Path],
    out_dir: Path,
    *,
    fmt: Format,
    tokenizer: Path,
    seq_len: int,
    packing: Literal["pack", "pad"] = "pack",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    overwrite: bool = False,
    notify: Callable[[str], None] | None = None,
) -> FinetuneManifest:
    """JSONL samples -> version 2 shards of whole rows under `out_dir`, and its manifest;
    `out_dir` appears only when all is written (refused when not empty, unless `overwrite`)."""
    check_inputs(inputs)
    check_out(out_dir, overwrite=overwrite, inputs=[*inputs, *read_files(tokenizer)])
    for path in inputs:  # every line read and checked before any tokenising
        for _ in iter_records(path, fmt):
            pass
    tok = load_tokenizer(tokenizer)
    pad = tok.pad_token_id if tok.pad_token_id is not None else (tok.eos_token_id or 0)
    samples = (s for path in inputs for s in iter_samples(path, fmt, tok))
    vocab = len(tok)
    dtype = token_dtype(vocab)
    rows_per_shard = max(1, shard_tokens // seq_len)
    counts: dict[str, int] = {}
    cut: list[str] = []
    with staged_dir(out_dir, overwrite=overwrite) as tmp:
        shards: list[ShardInfo] = []
        writer: ShardWriter | None = None
        # Streamed row by row: at 128k tokens a row is 1 MiB; the data set is never in memory.
        try:
            for tokens, flags in iter_rows(samples, seq_len, pad, packing, counts, cut):
                if writer is None:
                    writer = ShardWriter(tmp / f"shard-{len(shards):05d}.bin", dtype, flags=True)
                    writer.__enter__()
                writer.append(tokens, flags)
                if writer.count == rows_per_shard * seq_len:
                    done, writer = writer, None
                    shards.append(_close_shard(done, pad))
            if writer is not None:
                done, writer = writer, None
                shards.append(_close_shard(done, pad))
        finally:
            if writer is not None:  # an error mid-shard: no partial file left behind
                writer.__exit__(RuntimeError, None, None)
        st = PackStats(**counts)
        longer = f"longer than --seq-len {seq_len}: {_listed(cut)}" if cut else ""
        if st.rows == 0:
            raise SpecError(
                f"no sample with a token to learn from{'; ' + longer if cut else ''}",
                field="INPUT",
                hint="raise --seq-len, or shorten the samples named",
            )
        # The tokenizer travels with the data it made (an export ships it beside the model).
        tok.save_pretrained(str(tmp / TOKENIZER_DIR))
        manifest = FinetuneManifest(
            manifest_version=MANIFEST_VERSION,
            tokenizer=str(tokenizer),
            tokenizer_sha256=tokenizer_sha256(tmp / TOKENIZER_DIR),
            tokenizer_dir=TOKENIZER_DIR,
            vocab_size=vocab,
            eos_id=tok.eos_token_id,
            dtype=cast(TokenDtype, dtype.name),
            documents=st.samples,
            tokens=sum(s.tokens for s in shards),
            shards=shards,
            data_format=fmt,
            seq_len=seq_len,
            packing="pad" if packing == "pad" else "pack",
            sequences=st.rows,
            samples=st.samples,
            loss_tokens=st.loss_tokens,
            truncated=st.truncated,
            dropped=st.dropped,
        )
        write_text(tmp / MANIFEST_FILE, manifest.model_dump_json(indent=2) + "\n", flag=None)
    if cut and notify is not None:
        notify(f"warning: {len(cut)} sample(s) {longer}")
    return manifest

"""Fine-tuning data: chat and prompt-completion samples, their loss masks, packing into rows."""

from __future__ import annotations

import pytest

pytest.importorskip("transformers")
from cli_support import run_local_process
from hf_support import save_tiny_tokenizer

from blackwell_sm.data.finetune import (
    FLAG_LOSS,
    FLAG_START,
    Sample,
    chat_sample,
    load_tokenizer,
    pack_rows,
    prompt_completion_sample,
)
from blackwell_sm.errors import SpecError


@pytest.fixture(scope="module")
def tok(tmp_path_factory):
    folder = tmp_path_factory.mktemp("tok")
    save_tiny_tokenizer(folder)
    return load_tokenizer(folder)


def _words(tok, ids):
    return tok.convert_ids_to_tokens(ids)


def test_chat_counts_the_assistant_turns_only(tok):
    msgs = [
        {"role": "system", "content": "yes"},
        {"role": "user", "content": "hello cat"},
        {"role": "assistant", "content": "hi dog"},
        {"role": "user", "content": "what"},
        {"role": "assistant", "content": "no"},
    ]
    s = chat_sample(tok, msgs, "x:1")
    counted = [w for w, m in zip(_words(tok, s.tokens), s.loss, strict=True) if m]
    # the assistant's words and its end-of-turn token; never the user's or the role markers
    assert counted == ["hi", "dog", "<|end|>", "no", "<|end|>"]


def test_prompt_completion_counts_the_completion_and_its_end(tok):
    s = prompt_completion_sample(tok, "what did the cat", "sat on the mat")
    counted = [w for w, m in zip(_words(tok, s.tokens), s.loss, strict=True) if m]
    assert counted == ["sat", "on", "the", "mat", "<|end|>"]


def test_a_template_that_rewrites_history_is_refused(tmp_path):
    from hf_support import save_tiny_tokenizer as save

    t = save(tmp_path)
    # drops earlier assistant turns from the history: turn 1 is not a prefix of the whole
    t.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'assistant' or loop.last %}"
        "<|{{ m['role'] }}|> {{ m['content'] }} <|end|> {% endif %}{% endfor %}"
        "{% if add_generation_prompt %}<|assistant|> {% endif %}"
    )
    msgs = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yes"},
        {"role": "user", "content": "no"},
        {"role": "assistant", "content": "yes"},
    ]
    with pytest.raises(SpecError, match="x:3: the chat template does not render turn 1"):
        chat_sample(t, msgs, "x:3")


def test_packing_keeps_samples_whole_and_flags_starts_and_losses():
    samples = [
        Sample([1, 2, 3], [0, 1, 1]),
        Sample([4, 5], [0, 1]),
        Sample([6, 7, 8, 9], [0, 0, 1, 1]),
        Sample([10] * 9, [0] + [1] * 8),
        Sample([11, 12], [0, 0]),
    ]
    tokens, flags, st = pack_rows(iter(samples), seq_len=6, pad_id=0)
    assert tokens.reshape(-1, 6).tolist() == [
        [1, 2, 3, 4, 5, 0],  # the third sample does not fit: padding
        [6, 7, 8, 9, 0, 0],
        [10] * 6,  # cut to seq_len
    ]
    S, L = FLAG_START, FLAG_LOSS
    assert flags.reshape(-1, 6).tolist() == [
        [S, L, L, S, L, S],
        [S, 0, L, L, S, 0],
        [S, L, L, L, L, L],
    ]
    assert st == (3, 4, 1, 1, 2 + 1 + 2 + 5)  # rows, samples, truncated, dropped, loss tokens
    tokens, flags, st = pack_rows(iter(samples[:2]), seq_len=6, pad_id=0, packing="pad")
    assert tokens.reshape(-1, 6).tolist() == [[1, 2, 3, 0, 0, 0], [4, 5, 0, 0, 0, 0]]


CHAT = [
    {
        "messages": [
            {"role": "user", "content": "hello cat"},
            {"role": "assistant", "content": "hi dog yes"},
        ]
    },
    {
        "messages": [
            {"role": "system", "content": "no"},
            {"role": "user", "content": "what did"},
            {"role": "assistant", "content": "the cat sat on the mat"},
        ]
    },
    {
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yes"},
            {"role": "user", "content": "dog"},
            {"role": "assistant", "content": "ran fast"},
        ]
    },
] * 4


def _prepare_cli(tmp_path, tok_dir, *extra):
    import json

    from click.testing import CliRunner

    from blackwell_sm.cli import cli

    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in CHAT))
    out = tmp_path / "shards"
    args = ["data", "prepare", str(src), "--out", str(out), "--tokenizer", str(tok_dir)]
    r = CliRunner().invoke(cli, [*args, *extra, "--output", "json"])
    return r, out


def test_prepare_chat_writes_v2_rows_that_the_reader_masks(tmp_path):
    import json

    import numpy as np

    from blackwell_sm.data.shards import read_shard
    from blackwell_sm.train.data import ShardDataset

    tok_dir = tmp_path / "tok"
    save_tiny_tokenizer(tok_dir)
    r, out = _prepare_cli(tmp_path, tok_dir, "--format", "chat", "--seq-len", "24")
    assert r.exit_code == 0, r.output
    m = json.loads(r.output)
    assert m["format"] == "bsm-tokens-v2" and m["samples"] == 12 and m["seq_len"] == 24
    assert json.loads((out / "manifest.json").read_text())["sequences"] == m["sequences"]
    # the tokenizer travels with the rows it made
    saved = load_tokenizer(out / "tokenizer")
    assert saved.chat_template and saved.get_vocab() == load_tokenizer(tok_dir).get_vocab()
    ds = ShardDataset(out, seq_len=24, vocab_size=64)
    assert len(ds) == m["sequences"]
    tokens, loss_mask, doc_ids = ds.batch(np.arange(len(ds)), seed=0)
    assert tokens.shape == loss_mask.shape == doc_ids.shape == (len(ds), 25)
    tok = load_tokenizer(tok_dir)
    end = tok.convert_tokens_to_ids("<|end|>")
    counted = tokens[:, 1:][(loss_mask[:, 1:] == 1) & (doc_ids[:, 1:] == doc_ids[:, :-1])]
    words = set(tok.convert_ids_to_tokens(counted.tolist()))
    assert words == {"hi", "dog", "yes", "the", "cat", "sat", "on", "mat", "ran", "fast", "<|end|>"}
    assert int(((loss_mask == 1) & (tokens == end)).sum()) == 16  # one per assistant turn
    assert m["loss_tokens"] == int(loss_mask[:, :-1].sum())
    # a plain (version 1) shard still reads: tokens only
    assert read_shard(next(out.glob("*.bin"))).shape == (m["tokens"],)


def test_prepare_needs_seq_len_and_the_reader_refuses_another(tmp_path):
    from blackwell_sm.errors import BsmError
    from blackwell_sm.train.data import ShardDataset

    tok_dir = tmp_path / "tok"
    save_tiny_tokenizer(tok_dir)
    r, _ = _prepare_cli(tmp_path, tok_dir, "--format", "prompt-completion")
    assert isinstance(r.exception, SpecError) and r.exception.field == "--seq-len"
    r, out = _prepare_cli(tmp_path, tok_dir, "--format", "chat", "--seq-len", "16")
    assert r.exit_code == 0, r.output
    with pytest.raises(BsmError, match="packed to seq_len 16, the plan trains at seq_len 32"):
        ShardDataset(out, seq_len=32)


def test_prepare_finetune_is_all_or_nothing(tmp_path, monkeypatch):
    import json

    from blackwell_sm.data import finetune
    from blackwell_sm.data.manifest import load_manifest
    from blackwell_sm.data.tokenizer_files import tokenizer_sha256

    tok_dir = tmp_path / "tok"
    save_tiny_tokenizer(tok_dir)
    src = tmp_path / "chat.jsonl"
    src.write_text("".join(json.dumps(x) + "\n" for x in CHAT))
    kw = dict(fmt="chat", tokenizer=tok_dir, seq_len=24, shard_tokens=48)
    out = tmp_path / "sft"
    m = finetune.prepare_finetune([src], out, **kw)
    assert len(m.shards) > 2 and load_manifest(out) == m and m.manifest_version == 2
    assert m.tokenizer_sha256 == tokenizer_sha256(out / "tokenizer")
    assert all(s.bytes == (out / s.file).stat().st_size for s in m.shards)
    with pytest.raises(SpecError, match="is not empty") as e:
        finetune.prepare_finetune([src], out, **kw)
    assert e.value.field == "--out"
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    # the disk fills while the second shard is written: nothing new is left, the old is intact
    from blackwell_sm.data.shards import ShardWriter

    real = ShardWriter.append

    def failing(self, *a, **k):
        if self.path.name == "shard-00001.bin":
            raise OSError(28, "No space left on device")
        return real(self, *a, **k)

    monkeypatch.setattr(ShardWriter, "append", failing)
    for target, overwrite in ((tmp_path / "a" / "sft"), False), (out, True):
        with pytest.raises(OSError, match="No space left"):
            finetune.prepare_finetune([src], target, overwrite=overwrite, **kw)
    assert not (tmp_path / "a").exists()
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["chat.jsonl", "sft", "tok"]
    monkeypatch.setattr(ShardWriter, "append", real)
    m2 = finetune.prepare_finetune([src], out, overwrite=True, **{**kw, "shard_tokens": 1024})
    assert sorted(p.name for p in out.glob("*.bin")) == [s.file for s in m2.shards]


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["full", "lora"])
def test_chat_finetune_of_an_imported_model_runs_in_run_local(tmp_path, lora):
    """`bsm run-local`: a tiny Qwen3 from transformers (model: {hf}, init_from), chat data
    prepared by `bsm data prepare --format chat`, task: finetune for 2 epochs, selective-op;
    in full or with LoRA adapters, compiled (exported in PEFT's format, the merged model and the
    tokenizer beside them)."""
    import json

    from hf_support import TINY, save_hf_model

    src = tmp_path / "qwen3"
    save_hf_model(TINY["qwen3"], src)
    save_tiny_tokenizer(src)
    r, shards = _prepare_cli(tmp_path, src, "--format", "chat", "--seq-len", "24")
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)["sequences"]
    spec = {
        "model": {"hf": str(src)},
        "training": {
            "task": "finetune",
            "init_from": str(src),
            "seq_len": 24,
            "global_batch_seqs": 2,
            "epochs": 2,
            "precision": "bf16",
            "activation_checkpointing": "selective-op",
            "schedule": {"warmup_steps": 1},
            "data": {"source": "channel", "sequences": rows},
            "checkpoint": {"interval_steps": None, "interval_minutes": None, "async_save": False},
        },
    }
    if lora:  # compiled too: each checkpointed block with its adapters under torch.compile
        spec["training"]["peft"] = {"method": "lora", "rank": 4, "export_merged": True}
        spec["training"]["pins"] = {"compile": True}
    (tmp_path / "spec.yaml").write_text(json.dumps(spec))
    out = tmp_path / "run"
    proc = run_local_process(
        tmp_path / "spec.yaml", out, "--channel", f"train={shards}", timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    summary = json.loads((out / "output/data/summary.json").read_text())
    assert summary["status"] == "completed" and summary["final_step"] == -(-2 * rows // 2)
    plan = json.loads((out / "plan.json").read_text())
    assert plan["spec"]["training"]["optimizer"]["lr"] == 2e-5
    assert (out / "model" / "tokenizer.json").is_file()
    merged = out / "model" / ("merged" if lora else "")
    assert json.loads((merged / "config.json").read_text())["architectures"] == ["Qwen3ForCausalLM"]
    if lora:
        cfg = json.loads((out / "model/adapter_config.json").read_text())
        assert (cfg["peft_type"], cfg["r"]) == ("LORA", 4)
        assert plan["config"]["activation_checkpointing"] == "selective-op"
        assert plan["config"]["compile"] is True

"""The data and the model agree before anything starts (issue 37, item 2): a tokenizer, vocab,
sequence-count or length mismatch is refused by `bsm run-local` before any worker starts (the run
folder is never made) and by `bsm submit` before CreateTrainingJob (moto: no job, nothing
uploaded). The data is made by the real `bsm data prepare`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from aws_support import BUCKET, spec_dict
from cli_support import run

from blackwell_sm.cli import submit as submit_cli
from blackwell_sm.data.agree import ModelSide, Tokenizer, check_data_agrees
from blackwell_sm.data.manifest import load_manifest
from blackwell_sm.data.tokenizer_files import vocab_identity
from blackwell_sm.errors import DataError

TEXT = "hello world, this is a small corpus of bytes.\n\nanother document, a little longer.\n"
TOKENIZER = '{"model": {"vocab": {"a": 0, "b": 1}}, "added_tokens": []}'

# (case, training and model overrides, the field the refusal names, words of its message)
CASES: list[tuple[str, dict[str, Any], str, str]] = [
    (
        "vocab",
        {"model": {"preset": "tiny", "vocab_size": 200}},
        "model.vocab_size",
        "embedding rows",
    ),
    (
        "sequences",
        {"training": {"seq_len": 16, "epochs": 3, "data": {"sequences": 12}}},
        "training.data.sequences",
        "would count passes",
    ),
    ("length", {"training": {"seq_len": 256}}, "training.seq_len", "hold no sequence"),
    (
        "tokenizer",
        {"training": {"seq_len": 16, "init_from": "INIT"}},
        "training.init_from",
        "tokenized byte-level",
    ),
]


@pytest.fixture(scope="module")
def prepared(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Byte-level text data from `bsm data prepare` (no --tokenizer), and an init folder with a
    tokenizer of its own."""
    root = tmp_path_factory.mktemp("agree")
    (root / "corpus.txt").write_text(TEXT)
    code, _out, err = run("data", "prepare", str(root / "corpus.txt"), "--out", str(root / "data"))
    assert code == 0, err
    assert "byte-level" in err and "--tokenizer" in err  # the default is said, not silent
    (root / "init").mkdir()
    (root / "init" / "tokenizer.json").write_text(TOKENIZER)
    return root


def _spec(root: Path, case: dict[str, Any], **job: Any) -> dict[str, Any]:
    d: dict[str, Any] = spec_dict(**job) if job else {"model": "tiny"}
    d["model"] = case.get("model", "tiny")
    training = {"seq_len": 16, "total_steps": 2, **case.get("training", {})}
    if training.get("epochs"):
        training.pop("total_steps")
    if training.get("init_from") == "INIT":
        training["init_from"] = str(root / "init")
    d["training"] = training
    return d


@pytest.mark.parametrize(("case", "over", "field", "words"), CASES, ids=[c[0] for c in CASES])
def test_run_local_refuses_before_any_worker(prepared, tmp_path, case, over, field, words):
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(_spec(prepared, over)))
    out = tmp_path / "run"
    code, stdout, err = run(
        "run-local",
        str(spec),
        "--out",
        str(out),
        "--channel",
        f"train={prepared / 'data'}",
        "--output",
        "json",
    )
    assert code == 2, err
    error = json.loads(stdout)["error"]
    assert error["field"] == field and words in error["message"]
    assert not out.exists()  # nothing laid out, no launcher, no worker


@pytest.fixture
def aws(aws, monkeypatch):
    monkeypatch.setattr(submit_cli, "aws_context", lambda region: aws)
    return aws


@pytest.mark.parametrize(("case", "over", "field", "words"), CASES, ids=[c[0] for c in CASES])
def test_submit_refuses_before_create_training_job(
    aws, prepared, tmp_path, case, over, field, words
):
    s3 = aws.s3
    s3.upload_file(str(prepared / "data" / "manifest.json"), BUCKET, "data/train/manifest.json")
    d = _spec(prepared, over, channels={"train": {"s3_uri": f"s3://{BUCKET}/data/train/"}})
    if case == "tokenizer":  # on S3, as a job reads it
        s3.put_object(Bucket=BUCKET, Key="hf/tiny/tokenizer.json", Body=TOKENIZER.encode())
        d["training"]["init_from"] = f"s3://{BUCKET}/hf/tiny/"
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(d))
    code, stdout, err = run("submit", str(spec), "--output", "json")
    assert code == 2, err
    error = json.loads(stdout)["error"]
    assert error["field"] == field and words in error["message"]
    assert aws.sagemaker.list_training_jobs()["TrainingJobSummaries"] == []
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    assert not [k for k in keys if k.startswith("runs/")]  # no code bundle uploaded


def test_agreeing_data_passes_and_a_different_tokenizer_hash_is_refused(prepared):
    manifest = load_manifest(prepared / "data")
    assert manifest is not None
    count = (manifest.tokens - 1) // 16  # one shard: as train/data.py counts sequences
    want = ModelSide(vocab_size=256, seq_len=16, sequences=count, task="pretrain")
    assert check_data_agrees(manifest, want, where="m") == []
    mine = manifest.model_copy(update={"tokenizer": "bpe", "tokenizer_sha256": "a" * 64})
    init = want._replace(init_tokenizer=Tokenizer("b" * 64, "v1"), init_from="init")
    with pytest.raises(DataError, match="the ids mean different tokens") as e:
        check_data_agrees(mine, init, where="m", data_tokenizer=Tokenizer("a" * 64, "v2"))
    assert e.value.field == "training.init_from"
    # the same table saved again (other file bytes), or the very same files: agree
    assert check_data_agrees(mine, init, where="m", data_tokenizer=Tokenizer("a" * 64, "v1")) == []
    same = init._replace(init_tokenizer=Tokenizer("a" * 64, None))
    assert check_data_agrees(mine, same, where="m") == []
    # nothing to compare with: said, not passed silently
    assert "could not be compared" in check_data_agrees(mine, init, where="m")[0]


def test_vocab_identity_survives_a_resave_and_tells_tables_apart():
    a = json.dumps({"model": {"vocab": {"a": 0, "b": 1}, "merges": ["a b"]}, "added_tokens": []})
    b = json.dumps(
        {"added_tokens": [], "model": {"merges": [["a", "b"]], "vocab": {"b": 1, "a": 0}}}
    )
    c = json.dumps({"model": {"vocab": {"a": 1, "b": 0}}, "added_tokens": []})
    ids = [vocab_identity({"tokenizer.json": t.encode()}) for t in (a, b, c)]
    assert ids[0] == ids[1] != ids[2] and None not in ids

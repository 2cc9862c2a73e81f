"""Hugging Face Hub ids in `model: {hf: ORG/NAME[@REVISION]}` (spec/hub.py), offline: a local
cache laid out as huggingface_hub lays it out (blobs named by their hash, snapshots per commit,
refs per branch), read by huggingface_hub itself with HF_HUB_OFFLINE=1; and each refusal
through the real command: exit 2, one JSON error naming model.hf, no traceback."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import yaml
from cli_support import run
from hf_support import TINY

pytest.importorskip("huggingface_hub")
COMMIT = "0123456789abcdef0123456789abcdef01234567"


def cached_repo(
    cache: Path,
    repo: str,
    files: dict[str, bytes],
    *,
    commit: str = COMMIT,
    ref: str | None = "main",
) -> Path:
    """`repo` at `commit` in an HF cache: blobs/<sha256>, snapshots/<commit>/<file> linking to
    them, refs/<ref> holding the commit."""
    folder = cache / ("models--" + repo.replace("/", "--"))
    snap = folder / "snapshots" / commit
    snap.mkdir(parents=True, exist_ok=True)
    (folder / "blobs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = folder / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        (snap / name).symlink_to(Path("../..") / "blobs" / blob.name)
    if ref:
        (folder / "refs").mkdir(exist_ok=True)
        (folder / "refs" / ref).write_text(commit)
    return snap


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    c = tmp_path / "hf-cache"
    monkeypatch.setenv("HF_HUB_CACHE", str(c))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cached_repo(
        c,
        "acme/Tiny-Llama",
        {"config.json": json.dumps(TINY["llama-tied"]).encode(), "tokenizer_config.json": b"{}"},
    )
    moe = {**TINY["qwen3"], "model_type": "qwen3_moe", "num_experts": 8}
    cached_repo(c, "acme/tiny-moe", {"config.json": json.dumps(moe).encode()})
    cached_repo(c, "acme/no-config", {"README.md": b"hi"})
    return c


def plan(tmp_path: Path, hf: str) -> tuple[int, dict]:
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump({"model": {"hf": hf}, "training": {"seq_len": 64}}))
    code, out, err = run("plan", str(spec), "--instance-type", "ml.p6-b200.48xlarge", "-o", "json")
    assert "Traceback" not in err, err
    return code, json.loads(out)


@pytest.mark.parametrize(
    "hf", ["acme/Tiny-Llama", f"acme/Tiny-Llama@{COMMIT}", "acme/Tiny-Llama@main"]
)
def test_a_hub_id_plans_from_the_cache(cache, tmp_path, hf):
    code, out = plan(tmp_path, hf)
    assert code == 0, out
    assert out["model"]["name"] == "tiny-llama"
    assert out["spec"]["model"]["n_layers"] == TINY["llama-tied"]["num_hidden_layers"]


def test_a_local_folder_of_that_name_wins(cache, tmp_path, monkeypatch):
    local = tmp_path / "acme" / "Tiny-Llama"
    local.mkdir(parents=True)
    cfg = {**TINY["llama-tied"], "num_hidden_layers": 3}
    (local / "config.json").write_text(json.dumps(cfg))
    monkeypatch.chdir(tmp_path)
    code, out = plan(tmp_path, "acme/Tiny-Llama")
    assert code == 0 and out["spec"]["model"]["n_layers"] == 3


@pytest.mark.parametrize(
    ("hf", "words"),
    [
        (
            "acme/unknown-model",
            "no Hugging Face repository 'acme/unknown-model' in the local cache",
        ),
        ("acme/Tiny-Llama@v2.0", "has no revision 'v2.0' in the local cache"),
        ("acme/no-config", "has no config.json"),
        ("acme/tiny-moe", "not a supported family"),
    ],
)
def test_hub_ids_that_cannot_plan_are_refused_naming_model_hf(cache, tmp_path, hf, words):
    code, out = plan(tmp_path, hf)
    assert code == 2, out
    assert out["error"]["field"] == "model.hf" and words in out["error"]["message"], out


def test_what_is_not_a_hub_id():
    from blackwell_sm.spec.hub import parse_hub_id

    assert parse_hub_id("Qwen/Qwen3-14B") == ("Qwen/Qwen3-14B", None)
    assert parse_hub_id("meta-llama/Llama-3.1-8B@refs/pr/3") == (
        "meta-llama/Llama-3.1-8B",
        "refs/pr/3",
    )
    for not_hub in ("./models/x", "/abs/x", "a/b/c", "x", "a/b@", "~/m"):
        assert parse_hub_id(not_hub) is None, not_hub

"""Bad Hugging Face folders through the real commands, refused on the client before anything is
planned or paid for: `bsm plan` on `model: {hf: FOLDER}` (and a local `training.init_from`),
and `bsm submit --dry-run`. Each case: exit 2, one JSON error object naming the field and the
file (and the key, tensor or token), no traceback.

The folders are written here byte by byte (`write_safetensors`: the format's 8-byte length, the
JSON header, the data), so a case can break exactly one thing; `test_a_good_folder_plans` is the
positive control that the builder makes folders the check accepts.
"""

from __future__ import annotations

import json
import os
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from cli_support import run
from model_support import small_spec

from blackwell_sm.spec import arch
from blackwell_sm.spec.model import ModelSpec

CONFIG = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 32,
    "intermediate_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 50,
    "rms_norm_eps": 1e-5,
    "rope_theta": 10000.0,
    "max_position_embeddings": 128,
    "tie_word_embeddings": False,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
SPEC = small_spec(family="llama", d_model=32, ffn_dim=64, vocab_size=50, tie_embeddings=False)
DT = {"F32": np.float32, "F16": np.float16, "I32": np.int32}


def tensors(spec: ModelSpec = SPEC, dtype: str = "F32") -> dict[str, np.ndarray]:
    return {arch.hf_key(n): np.zeros(s, DT[dtype]) for n, s in arch.param_table(spec).items()}


def header_for(arrays: dict[str, np.ndarray]) -> tuple[dict[str, Any], bytes]:
    head: dict[str, Any] = {}
    data = b""
    for name in sorted(arrays):
        a = arrays[name]
        kind = {np.float32: "F32", np.float16: "F16", np.int32: "I32"}[a.dtype.type]
        head[name] = {
            "dtype": kind,
            "shape": list(a.shape),
            "data_offsets": [len(data), len(data) + a.nbytes],
        }
        data += a.tobytes()
    return head, data


def write_safetensors(path: Path, head: dict[str, Any], data: bytes, *, raw: bytes | None = None):
    text = raw if raw is not None else json.dumps(head).encode()
    path.write_bytes(struct.pack("<Q", len(text)) + text + data)


def tokenizer(n: int) -> dict[str, Any]:
    vocab = {f"w{i}": i for i in range(n - 1)}
    return {
        "model": {"type": "WordLevel", "vocab": vocab, "unk_token": "w0"},
        "added_tokens": [{"id": n - 1, "content": "</s>", "special": True}],
    }


def good_folder(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "config.json").write_text(json.dumps(CONFIG))
    write_safetensors(folder / "model.safetensors", *header_for(tensors()))
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer(50)))
    return folder


def plan(tmp: Path, model: dict[str, Any], training: dict[str, Any] | None = None):
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump({"model": model, "training": training or {}}))
    return run("plan", str(spec), "--output", "json")


def refused(result: tuple[int, str, str], field: str, *texts: str) -> str:
    code, out, err = result
    assert code == 2, (code, out, err)
    obj = json.loads(out)["error"]  # exactly one JSON document on stdout
    assert obj["exit_code"] == 2 and obj["field"] == field, obj
    for t in texts:
        assert t in obj["message"], (t, obj["message"])
    assert "Traceback" not in err
    return obj["message"]


def test_a_good_folder_plans(tmp_path):
    code, out, err = plan(tmp_path, {"hf": str(good_folder(tmp_path / "m"))})
    assert code == 0, err
    assert json.loads(out)["spec"]["model"]["n_layers"] == 2


# -- config.json: nothing coerced, everything bounded ----------------------------------------
CONFIG_CASES: list[tuple[str, str, Any, str]] = [
    ("bool-size", "hidden_size", True, "hidden_size=True: expected an integer"),
    ("float-layers", "num_hidden_layers", 2.0, "num_hidden_layers=2.0: expected an integer"),
    ("string-vocab", "vocab_size", "50", "vocab_size='50': expected an integer"),
    ("zero-width", "hidden_size", 0, "hidden_size=0: Input should be greater than 0"),
    ("huge-ffn", "intermediate_size", 10**9, "intermediate_size=1000000000: Input should be"),
    ("negative-positions", "max_position_embeddings", -4, "max_position_embeddings=-4"),
    ("string-eps", "rms_norm_eps", "1e-5", "rms_norm_eps='1e-5': expected a finite number"),
    ("eps-one", "rms_norm_eps", 1.0, "rms_norm_eps=1.0: Input should be less than 1"),
    ("string-tie", "tie_word_embeddings", "yes", "tie_word_embeddings='yes': expected true"),
    ("string-eos", "eos_token_id", "2", "eos_token_id='2': expected a token id"),
    ("float-bos", "bos_token_id", 1.0, "bos_token_id=1.0: expected an integer"),
    ("other-family", "model_type", "gemma", "model_type='gemma': not a supported family"),
    ("other-class", "architectures", ["MixtralForCausalLM"], "model_type llama is LlamaForCausal"),
    ("moe", "num_local_experts", 8, "mixture-of-experts"),
    ("gelu", "hidden_act", "gelu", "hidden_act='gelu'"),
    ("list-heads", "num_attention_heads", [4], "num_attention_heads=[4]: expected an integer"),
    ("null-vocab", "vocab_size", None, "vocab_size=None: required key is missing"),
    (
        "scaling-text",
        "rope_scaling",
        {
            "rope_type": "llama3",
            "factor": "8",
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 16,
        },
        "factor='8'",
    ),
]


@pytest.mark.parametrize(
    ("key", "value", "expected"), [c[1:] for c in CONFIG_CASES], ids=[c[0] for c in CONFIG_CASES]
)
def test_a_config_value_of_the_wrong_kind_is_refused_with_its_key(tmp_path, key, value, expected):
    folder = good_folder(tmp_path / "m")
    (folder / "config.json").write_text(json.dumps({**CONFIG, key: value}))
    refused(plan(tmp_path, {"hf": str(folder)}), "model.hf", f"{folder}/config.json: ", expected)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('{"model_type": "llama", "model_type": "llama"}', "duplicate key 'model_type'"),
        ('{"hidden_size": NaN}', "NaN is not JSON"),
        ('{"rope_theta": 1e400}', "1e400 is not a finite number"),
        ("[1, 2]", "expected a mapping at the top"),
        ("\xff\xfe{}", "is not UTF-8"),
    ],
    ids=["duplicate-key", "nan", "overflow", "not-a-mapping", "not-utf8"],
)
def test_a_config_file_that_does_not_parse_is_refused(tmp_path, text, expected):
    folder = good_folder(tmp_path / "m")
    (folder / "config.json").write_bytes(text.encode("latin-1"))
    refused(plan(tmp_path, {"hf": str(folder)}), "model.hf", expected)


# -- safetensors: headers against the file and against the architecture ---------------------
def _broken(mutate: Callable[[dict, bytes], tuple[dict, bytes]]) -> Callable[[Path], None]:
    def make(folder: Path) -> None:
        head, data = mutate(*header_for(tensors()))
        write_safetensors(folder / "model.safetensors", head, data)

    return make


def _drop(name: str) -> Callable[[dict, bytes], tuple[dict, bytes]]:
    def mutate(head: dict, data: bytes) -> tuple[dict, bytes]:
        arrays = tensors()
        del arrays[name]
        return header_for(arrays)

    return mutate


def _wrong_shape(head: dict, data: bytes) -> tuple[dict, bytes]:
    arrays = tensors()
    arrays["model.norm.weight"] = np.zeros(31, np.float32)
    return header_for(arrays)


def _extra(head: dict, data: bytes) -> tuple[dict, bytes]:
    return header_for({**tensors(), "model.layers.2.mlp.up_proj.weight": np.zeros(2, np.float32)})


def _int_dtype(head: dict, data: bytes) -> tuple[dict, bytes]:
    return header_for(tensors(dtype="I32"))


def _overlap(head: dict, data: bytes) -> tuple[dict, bytes]:
    second = sorted(head, key=lambda k: head[k]["data_offsets"][0])[1]
    head[second]["data_offsets"] = [x - 4 for x in head[second]["data_offsets"]]
    return head, data


def _bool_shape(head: dict, data: bytes) -> tuple[dict, bytes]:
    head["model.norm.weight"]["shape"] = [True] * 32
    return head, data


def _bad_dtype(head: dict, data: bytes) -> tuple[dict, bytes]:
    head["model.norm.weight"]["dtype"] = "F128"
    return head, data


def _truncate(folder: Path) -> None:
    f = folder / "model.safetensors"
    f.write_bytes(f.read_bytes()[:-100])


def _append(folder: Path) -> None:
    with open(folder / "model.safetensors", "ab") as f:
        f.write(b"\0" * 16)


def _huge_header(folder: Path) -> None:
    (folder / "model.safetensors").write_bytes(struct.pack("<Q", 1 << 62) + b"{}")


def _not_json(folder: Path) -> None:
    write_safetensors(folder / "model.safetensors", {}, b"", raw=b"{not json")


def _fifo(folder: Path) -> None:
    (folder / "model.safetensors").unlink()
    os.mkfifo(folder / "model.safetensors")


def _index(folder: Path, weight_map: dict[str, str]) -> None:
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))


def _index_missing_file(folder: Path) -> None:
    _index(folder, {k: "model-00002.safetensors" for k in tensors()})


def _index_escapes(folder: Path) -> None:
    _index(folder, {k: "../model.safetensors" for k in tensors()})


def _index_unlisted(folder: Path) -> None:
    (folder / "model.safetensors").rename(folder / "model-00001.safetensors")
    _index(folder, {k: "model-00001.safetensors" for k in tensors()})
    write_safetensors(folder / "stale.safetensors", *header_for({"x": np.zeros(1, np.float32)}))


def _twice(folder: Path) -> None:
    (folder / "model.safetensors").rename(folder / "a.safetensors")
    norm = {"model.norm.weight": np.zeros(32, np.float32)}
    write_safetensors(folder / "b.safetensors", *header_for(norm))


def _big_token(folder: Path) -> None:
    (folder / "tokenizer.json").write_text(json.dumps(tokenizer(51)))


def _tokenizer_not_json(folder: Path) -> None:
    (folder / "tokenizer.json").write_text("{")


FOLDER_CASES: list[tuple[str, Callable[[Path], None], list[str]]] = [
    ("truncated", _truncate, ["model.safetensors: not a valid safetensors file", "(truncated)"]),
    ("appended", _append, ["model.safetensors", "(longer than its tensors)"]),
    ("huge-header", _huge_header, ["model.safetensors", "a header of 4,611,686,018,427,387,904"]),
    ("header-not-json", _not_json, ["model.safetensors", "is not valid JSON"]),
    ("fifo", _fifo, ["model.safetensors is not a regular file"]),
    (
        "missing-tensor",
        _broken(_drop("model.layers.1.self_attn.v_proj.weight")),
        ["does not match the model", "missing 1: model.layers.1.self_attn.v_proj.weight"],
    ),
    ("wrong-shape", _broken(_wrong_shape), ["wrong shape 1: model.norm.weight [31] (model: [32])"]),
    ("extra-tensor", _broken(_extra), ["unexpected 1: model.layers.2.mlp.up_proj.weight"]),
    ("int-weights", _broken(_int_dtype), ["dtype not one of F32, BF16, F16", "I32"]),
    ("overlap", _broken(_overlap), ["overlaps the previous tensor"]),
    ("bool-shape", _broken(_bool_shape), ["model.norm.weight", "is not a list of at most 8"]),
    ("bad-dtype", _broken(_bad_dtype), ["unknown dtype 'F128'"]),
    (
        "index-missing-file",
        _index_missing_file,
        ["lists 1 weight file(s) that are missing: model-00002.safetensors"],
    ),
    ("index-escapes", _index_escapes, ["is not a file name in the folder"]),
    ("index-unlisted", _index_unlisted, ["stale.safetensors not listed in model.safetensors."]),
    (
        "tensor-twice",
        _twice,
        ["tensor model.norm.weight is in both a.safetensors and b.safetensors"],
    ),
    (
        "token-beyond-vocab",
        _big_token,
        ["tokenizer.json: token '</s>' has id 50, not below the model's vocab_size 50"],
    ),
    ("tokenizer-not-json", _tokenizer_not_json, ["tokenizer.json is not valid JSON"]),
]


@pytest.mark.parametrize(
    ("make", "expected"), [c[1:] for c in FOLDER_CASES], ids=[c[0] for c in FOLDER_CASES]
)
def test_a_bad_weight_folder_is_refused_naming_the_file(tmp_path, make, expected):
    folder = good_folder(tmp_path / "m")
    make(folder)
    refused(plan(tmp_path, {"hf": str(folder)}), "model.hf", *expected)


def test_a_local_init_from_is_checked_against_the_final_model(tmp_path):
    """init_from is checked after the spec's overrides: a folder for 2 layers, a spec of 3."""
    folder = good_folder(tmp_path / "m")
    model = {"hf": str(folder), "n_layers": 3}
    (folder / "model.safetensors").rename(tmp_path / "weights.safetensors")  # config-only hf
    init = good_folder(tmp_path / "init")
    refused(
        plan(tmp_path, model, {"init_from": str(init)}),
        "training.init_from",
        "missing 9: model.layers.2.",
    )


def test_submit_dry_run_refuses_a_bad_folder_before_anything_else(tmp_path):
    from aws_support import spec_dict

    folder = good_folder(tmp_path / "m")
    _truncate(folder)
    spec = spec_dict()
    spec["model"] = {"hf": str(folder)}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    refused(run("submit", str(path), "--dry-run", "--output", "json"), "model.hf", "(truncated)")

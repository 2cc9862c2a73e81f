"""The one safe loader (blackwell_sm.safe_load), the spec schema and the sources of the limits."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from blackwell_sm.errors import SpecError
from blackwell_sm.safe_load import MAX_INT_DIGITS, load_mapping, parse_json, parse_yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "text,expected",
    [
        ("yes", "yes"),
        ("no", "no"),
        ("on", "on"),
        ("off", "off"),
        ("Yes", "Yes"),
        ("y", "y"),
        ("true", True),
        ("False", False),
        ("TRUE", True),
        ("null", None),
        ("~", None),
        ("", None),
        ("42", 42),
        ("-7", -7),
        ("0o17", 15),
        ("0x1f", 31),
        ("1_000", "1_000"),
        ("010", 10),
        ("3e-4", 3e-4),
        ("1.5", 1.5),
        ("-.5", -0.5),
        (".inf", float("inf")),
        ("-.Inf", float("-inf")),
        ("2026-01-01", "2026-01-01"),
        ("1:30", "1:30"),
    ],
)
def test_yaml_1_2_core_scalars(text, expected):
    assert parse_yaml(f"v: {text}")["v"] == expected
    assert type(parse_yaml(f"v: {text}")["v"]) is type(expected)


def test_yaml_nan_is_a_float_for_the_spec_to_refuse():
    value = parse_yaml("v: .nan")["v"]
    assert isinstance(value, float) and value != value


@pytest.mark.parametrize(
    "text,words",
    [
        ("a: 1\nb: 2\na: 3", "duplicate key 'a' (first at line 1)"),
        ("a: {x: 1, x: 2}", "duplicate key 'x'"),
        ("a: " + "9" * (MAX_INT_DIGITS + 1), f"{MAX_INT_DIGITS + 1} digits"),
        ("a: " + "[" * 40 + "]" * 40, "nesting deeper than"),
        ("a: !!binary aGk=", "constructor"),
        ("a: !!timestamp 2026-01-01", "constructor"),
        ("a: !!python/object/apply:os.system [ls]", "constructor"),
        ("<<: {a: 1}\n<<: {b: 2}", "duplicate key '<<'"),
        ("a: [1", "not valid YAML at line"),
    ],
)
def test_yaml_refusals(text, words):
    with pytest.raises(SpecError) as e:
        parse_yaml(text)
    assert words in str(e.value)


def test_merge_key_is_plain_text_in_yaml_1_2():
    assert parse_yaml("<<: {a: 1}") == {"<<": {"a": 1}}


def test_aliases_are_allowed_but_a_bomb_is_counted_not_built():
    assert parse_yaml("a: &x [1, 2]\nb: *x") == {"a": [1, 2], "b": [1, 2]}
    bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n"
        for p, c in zip("abcdefgh", "bcdefghi", strict=True)
    )
    with pytest.raises(SpecError, match="aliases are expanded"):
        parse_yaml(bomb)


@pytest.mark.parametrize(
    "text,words",
    [
        ('{"a": 1, "a": 2}', "duplicate key 'a'"),
        ('{"a": NaN}', "NaN"),
        ('{"a": Infinity}', "Infinity"),
        ('{"a": -Infinity}', "Infinity"),
        ('{"a": ' + "1" * 50 + "}", "50 digits"),
        ("[" * 100 + "]" * 100, "nesting deeper than"),
        ("[" * 100_000 + "]" * 100_000, "nesting deeper than"),
        ('{"a": 1', "not valid JSON at line 1"),
    ],
)
def test_json_refusals(text, words):
    with pytest.raises(SpecError) as e:
        parse_json(text)
    assert words in str(e.value)


def test_files(tmp_path):
    good = tmp_path / "ok.json"
    good.write_text('{"a": [1, 2.5, true, null]}')
    assert load_mapping(good) == {"a": [1, 2.5, True, None]}
    bom = tmp_path / "bom.yaml"
    bom.write_bytes(b"\xef\xbb\xbfmodel: tiny\n")
    assert load_mapping(bom) == {"model": "tiny"}
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(b"model: tiny\nname: \xff\xfe\n")
    with pytest.raises(SpecError, match="offset 18") as e:
        load_mapping(bad, field="SPEC")
    assert e.value.field == "SPEC" and e.value.exit_code == 2
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(SpecError, match="mapping at the top, got list"):
        load_mapping(listed)
    big = tmp_path / "big.yaml"
    big.write_text("a: 1\n" * 100)
    with pytest.raises(SpecError, match="at most 100 bytes"):
        load_mapping(big, max_bytes=100)


def test_container_plan_and_manifest_go_through_the_loader(tmp_path):
    """plan.json and manifest.json: duplicate keys and NaN are refused, not read loosely."""
    from blackwell_sm.launch.topology import read_plan
    from blackwell_sm.train.data import ShardDataset

    plan = tmp_path / "plan.json"
    plan.write_text('{"schema_version": 1, "schema_version": 2}')
    with pytest.raises(SpecError, match="duplicate key 'schema_version'"):
        read_plan(plan)
    with pytest.raises(SpecError, match="cannot read"):
        read_plan(tmp_path / "missing.json")
    (tmp_path / "manifest.json").write_text('{"vocab_size": NaN}')
    with pytest.raises(SpecError, match="NaN"):
        ShardDataset(tmp_path, seq_len=4, vocab_size=256)


def test_ecr_repository_pattern_is_botocores():
    import botocore.session

    from blackwell_sm.spec.aws_rules import ECR_REPOSITORY_PATTERN

    model = botocore.session.get_session().get_service_model("ecr")
    assert model.shape_for("RepositoryName").metadata["pattern"] == ECR_REPOSITORY_PATTERN


def test_keep_alive_bound_is_botocores():
    from blackwell_sm.job.validate import shape_at
    from blackwell_sm.spec import JobSpec

    seconds = shape_at("ResourceConfig").members["KeepAlivePeriodInSeconds"].metadata["max"]
    bound = next(
        m.le for m in JobSpec.model_fields["keep_alive_minutes"].metadata if hasattr(m, "le")
    )
    assert bound * 60 == seconds


def test_every_shipped_template_validates_against_the_schema():
    import jsonschema

    from blackwell_sm.spec.schema import spec_json_schema

    schema = spec_json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    templates = sorted((ROOT / "templates").glob("*.yaml"))
    assert len(templates) >= 8
    for path in templates:
        jsonschema.validate(load_mapping(path), schema)
    for model in ("llama-64b", {"preset": "tiny", "n_layers": 4}):
        jsonschema.validate({"model": model}, schema)
    for bad in ({"model": "llama-9b"}, {"model": {"preset": "tiny", "bogus": 1}}):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(bad, schema)


def _forms(v: float) -> set[str]:
    out = {str(v), f"{v:g}", f"{float(v):.0e}".replace("e+", "e")}
    if float(v) == int(v):
        out.add(str(int(v)))
    return out


def test_every_bounded_field_documents_its_bound():
    from blackwell_sm.spec.schema import bounded_fields

    rows = bounded_fields()
    assert len(rows) >= 40
    lower = re.compile(r"> ?0|>= ?[01]|\b[01]\.\.|[\[(][01]\b|\b1-\d")
    for row in rows:
        desc = row["description"]
        for key, value in row["bounds"].items():
            if key in ("maximum", "exclusiveMaximum", "maxLength"):
                assert any(f in desc for f in _forms(value)), (row["field"], key, value, desc)
            if key in ("minimum", "exclusiveMinimum", "minLength"):
                assert lower.search(desc), (row["field"], key, value, desc)


def test_limits_doc_lists_every_bounded_field():
    from blackwell_sm.spec.schema import bounded_fields

    doc = (ROOT / "docs" / "limits.md").read_text()
    for row in bounded_fields():
        leaf = row["field"].rsplit(".", 1)[-1]
        assert leaf in doc, row["field"]
    assert "docs/limits.md" in (ROOT / "README.md").read_text()


def test_bsm_schema_json_and_table(capsys):
    from blackwell_sm.cli import main

    for args in (["schema"], ["schema", "--output", "json"]):
        with pytest.raises(SystemExit) as e:
            main(args)
        assert e.value.code == 0
        doc = json.loads(capsys.readouterr().out)
        assert "llama-64b" in json.dumps(doc["properties"]["model"])
    with pytest.raises(SystemExit) as e:
        main(["schema", "-o", "table"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and "training.seed" in out and "4294967295" in out


def test_spec_yaml_round_trip_of_templates_is_unchanged_by_the_loader():
    """The new loader reads every template exactly as PyYAML's safe_load did."""
    for path in sorted((ROOT / "templates").glob("*.yaml")):
        assert load_mapping(path) == yaml.safe_load(path.read_text()), path


def test_json_loading_needs_no_pyyaml(tmp_path):
    """The container has no PyYAML: reading plan.json must not import it."""
    import subprocess
    import sys

    plan = tmp_path / "plan.json"
    plan.write_text('{"a": 1}')
    code = (
        "import sys; sys.modules['yaml'] = None\n"
        "from blackwell_sm.safe_load import load_mapping\n"
        f"assert load_mapping({str(plan)!r}, fmt='json') == {{'a': 1}}\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)

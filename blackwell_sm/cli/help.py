"""What `--help` shows beyond the options: examples for every command, and shell completion of
preset names, instance types and spec files. Applied to each command when it is loaded
(`decorate`), so the command modules stay about parsing and rendering.

`tests/test_cli_help.py` checks every command has examples and that every example is a command
line the real command tree accepts.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import click

# command path -> (command line, what it does). A group's entry covers the group itself.
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "": [
        ("bsm init llama-3.1-70b > spec.yaml", "a commented spec to start from"),
        ("bsm plan --model llama-3.1-70b --seq-len 4096", "configuration, time, cost"),
        ("bsm submit spec.yaml --dry-run", "the exact CreateTrainingJob request"),
        ("bsm submit spec.yaml --wait", "submit (or reattach) and follow"),
        ("bsm completion bash > ~/.bsm-complete.bash", "shell completion"),
    ],
    "plan": [
        ("bsm plan spec.yaml", "the chosen configuration, memory, speed, time and cost"),
        ("bsm plan --model llama-3.1-70b --seq-len 4096", "a preset, no spec file"),
        ("bsm plan spec.yaml --instance-count auto", "the fewest instances within the deadline"),
        ("bsm plan spec.yaml --instance-count auto --optimize cost", "the cheapest count instead"),
        ("bsm plan spec.yaml --set precision=bf16 --set micro_batch_size=2", "pin knobs"),
        ("bsm plan spec.yaml -o json | jq .run.cost_usd", "for scripts"),
    ],
    "init": [
        ("bsm init llama-3.1-70b > spec.yaml", "a preset's spec on stdout"),
        ("bsm init qwen3-8b --task finetune --out sft.yaml", "fine-tuning, to a new file"),
        ("bsm init ./Llama-3.1-8B", "the model in a Hugging Face folder (config.json)"),
    ],
    "presets": [
        ("bsm presets", "every preset: parameters, context, fit on one p6-b200"),
        ("bsm presets -o json", "the same, for scripts"),
    ],
    "schema": [
        ("bsm schema > spec.schema.json", "the spec's JSON schema, for an editor"),
        ("bsm schema -o table", "every bounded field and its limits"),
    ],
    "submit": [
        ("bsm submit spec.yaml --dry-run", "plan and request; nothing is sent"),
        ("bsm submit spec.yaml --wait --logs", "submit, then follow the logs to the end"),
        ("bsm submit spec.yaml --training-plan my-plan", "on a Flexible Training Plan"),
        ("bsm submit spec.yaml --yes -o json", "from CI: consent given, JSON out"),
        ("bsm submit spec.yaml --until-done", "job after job until the run is done"),
    ],
    "status": [
        ("bsm status bsm-llama-3-1-8b-0123456789ab", "status, progress against the plan"),
        ("bsm status JOB --wait -o json", "poll until it ends; JSON"),
    ],
    "logs": [
        ("bsm logs JOB", "the logs so far, every instance"),
        ("bsm logs JOB --follow", "keep printing until the job ends"),
    ],
    "stop": [("bsm stop JOB", "SIGTERM: the loop saves a checkpoint and exits")],
    "list": [
        ("bsm list", "this toolkit's 20 newest jobs"),
        ("bsm list --status InProgress -o json", "running jobs, for scripts"),
    ],
    "plans": [
        ("bsm plans search spec.yaml", "offerings long enough for the spec's run"),
        ("bsm plans list --status Active", "your active plans"),
    ],
    "plans search": [
        ("bsm plans search spec.yaml", "offerings for the predicted run"),
        ("bsm plans search --instance-type ml.p6-b200.48xlarge --count 2 --hours 72", "by hand"),
    ],
    "plans reserve": [
        ("bsm plans reserve OFFERING_ID --name my-plan spec.yaml", "shows the fee, then asks"),
    ],
    "plans extend": [
        ("bsm plans extend my-plan --spec spec.yaml", "extension offerings; does the run fit?"),
        ("bsm plans extend my-plan --days 7", "buy 7 more days (asks first)"),
    ],
    "plans list": [("bsm plans list", "every plan in the region")],
    "plans describe": [("bsm plans describe my-plan --spec spec.yaml", "does the run fit it?")],
    "iam-policy": [
        ("bsm iam-policy spec.yaml", "caller and job-role policies for this spec"),
        ("bsm iam-policy -o json", "generic policies, JSON"),
    ],
    "run-local": [
        ("bsm run-local spec.yaml --nproc 2", "the real launcher and loop on this machine"),
        ("bsm run-local spec.yaml --channel train=./shards --fresh", "local data, from step 0"),
    ],
    "data": [
        ("bsm data prepare corpus.jsonl --out shards/", "text or JSONL to token shards"),
        ("bsm data verify shards/", "check shards against their manifest"),
    ],
    "data prepare": [
        ("bsm data prepare a.txt b.jsonl --out shards/", "byte-level tokens"),
        (
            "bsm data prepare chat.jsonl --out sft/ --format chat --tokenizer DIR --seq-len 4096",
            "chat fine-tuning data",
        ),
    ],
    "data verify": [("bsm data verify shards/ --vocab-size 128256", "sizes, hashes, token ids")],
    "calibrate": [
        ("bsm calibrate run-a run-b --out calib.yaml", "fit the planner to your runs"),
        ("bsm plan spec.yaml --calibration calib.yaml", "then plan with the profile"),
    ],
    "report": [("bsm report run-a --out run-a/report.html", "the run against its plan")],
    "completion": [
        ("bsm completion bash > ~/.bsm-complete.bash", "then: source ~/.bsm-complete.bash"),
        ("bsm completion zsh > ~/.bsm-complete.zsh", "then: source ~/.bsm-complete.zsh"),
        ("bsm completion fish > ~/.config/fish/completions/bsm.fish", "fish loads it itself"),
    ],
}


def epilog(path: str) -> str | None:
    """The examples of `path` as a help epilog (`\\b` keeps click from rewrapping them)."""
    rows = EXAMPLES.get(path)
    if not rows:
        return None
    lines = [line for cmd, what in rows for line in (f"  # {what}", f"  {cmd}")]
    return "\b\nExamples:\n" + "\n".join(lines)


def complete_presets(ctx: Any, param: Any, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from blackwell_sm.spec.presets import PRESETS

    return [
        CompletionItem(name, help=f"{spec.n_params / 1e9:.1f}B parameters")
        for name, spec in PRESETS.items()
        if name.startswith(incomplete)
    ]


def complete_instance_types(ctx: Any, param: Any, incomplete: str) -> list[Any]:
    from click.shell_completion import CompletionItem

    from blackwell_sm.hardware import CATALOG

    return [CompletionItem(name) for name in CATALOG if name.startswith(incomplete)]


SPEC_SUFFIXES = (".yaml", ".yml", ".json")


def complete_spec_paths(ctx: Any, param: Any, incomplete: str) -> list[Any]:
    """Folders and YAML/JSON files under the typed prefix (a spec is one of those)."""
    from click.shell_completion import CompletionItem

    folder, _, stem = incomplete.rpartition(os.sep)
    base = Path(folder or ".")
    try:
        entries = sorted(base.iterdir())
    except OSError:
        return []
    out = []
    for entry in entries:
        if not entry.name.startswith(stem) or (entry.name.startswith(".") and not stem):
            continue
        shown = f"{folder}{os.sep}{entry.name}" if folder else entry.name
        if entry.is_dir():
            out.append(CompletionItem(shown + os.sep, type="plain"))
        elif entry.suffix in SPEC_SUFFIXES:
            out.append(CompletionItem(shown, type="plain"))
    return out


def _is_spec_param(param: click.Parameter) -> bool:
    names = {param.name or "", *(getattr(param, "opts", ()) or ())}
    return bool(names & {"spec", "spec_path", "--spec"}) or "SPEC" in (param.metavar or "")


def decorate(cmd: click.Command, path: str) -> click.Command:
    """Attach `path`'s examples and the completers to `cmd` (and to a group's subcommands)."""
    if getattr(cmd, "_bsm_decorated", False):
        return cmd
    cmd.epilog = cmd.epilog or epilog(path)
    for param in cmd.params:
        opts = set(getattr(param, "opts", ()))
        if "--model" in opts:
            param._custom_shell_complete = complete_presets
        elif "--instance-type" in opts:
            param._custom_shell_complete = complete_instance_types
        elif _is_spec_param(param):
            param._custom_shell_complete = complete_spec_paths
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            decorate(sub, f"{path} {name}".strip())
    cmd._bsm_decorated = True  # type: ignore[attr-defined]
    return cmd

"""`bsm iam-policy [SPEC.yaml]`: the least-privilege IAM policies this toolkit needs."""

from __future__ import annotations

import json

import click

from blackwell_sm.cli.output import OUTPUT_OPTION, emit_json, info


@click.command("iam-policy")
@click.argument("spec", required=False, type=click.Path(dir_okay=False))
@OUTPUT_OPTION
def iam_policy(spec: str | None, output: str) -> None:
    """Print the IAM policies for the caller (who runs bsm) and for the job's role.

    With SPEC, ARNs are narrowed to its region, account, role, S3 prefixes, channels, image
    and KMS keys; without it, REPLACE-ME placeholders mark what to fill in.
    """
    from blackwell_sm.job.iam import iam_policies
    from blackwell_sm.spec import load_spec

    policies = iam_policies(load_spec(spec) if spec else None)
    if output == "json":
        emit_json(policies)
        return
    for note in policies["notes"]:
        info(f"note: {note}")
    sections = [
        ("caller", "Caller policy: attach to the user, CI role or notebook role that runs bsm"),
        ("job_role", "Job role policy: attach to job.role_arn"),
        ("job_role_trust", "Job role trust policy"),
    ]
    for key, title in sections:
        click.echo(f"# {title}")
        click.echo(json.dumps(policies[key], indent=2))

"""The AWS layer: the only package that talks to AWS (boto3, imported lazily).

session (clients, retries, env), errors (actionable messages), s3 (code bundle), jobs
(create/describe/list/stop), logs (CloudWatch), training_plans (Flexible Training Plans),
submit (`submit(spec) -> TrainingJob`), handle (`TrainingJob`) and sdk (the SDK view's upload).
"""

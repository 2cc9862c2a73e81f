"""Consent before an expensive run: a job whose pessimistic cost is over
`compute.confirm_cost_usd` starts only with --yes or a person's yes (as a plan reservation)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from blackwell_sm.errors import ConsentRequiredError

if TYPE_CHECKING:
    from blackwell_sm.planner.plan import Plan
    from blackwell_sm.spec import RunSpec


def confirm_cost(rs: RunSpec, plan: Plan, *, consent: Any) -> None:
    """Above `compute.confirm_cost_usd` (pessimistic end of the plan's cost), a job starts only
    with consent: True (--yes), or a prompt that says yes; no terminal and no --yes: exit 5."""
    r = plan.run
    high = r.cost_usd_range[1] if r.cost_usd_range else r.cost_usd
    limit = rs.compute.confirm_cost_usd
    if high is None or high <= limit or consent is True:
        return
    what = (
        f"{plan.model.name} on {plan.instance.count} x {plan.instance.type}: predicted "
        f"${r.cost_usd:,.0f}, up to ${high:,.0f} at the pessimistic end, over "
        f"compute.confirm_cost_usd ${limit:,.0f}"
    )
    if not callable(consent):
        raise ConsentRequiredError(
            f"{what}\nRefusing without consent: there is no terminal to ask on.",
            hint="run it again with --yes (Python: yes=True), or raise compute.confirm_cost_usd",
        )
    if not consent(f"{what}\nStart the job?"):
        raise ConsentRequiredError("not submitted: you declined", hint="nothing was started")

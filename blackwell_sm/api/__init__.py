"""The notebook front door: one decider per question (a plan, a traced plan, whether a run fits
a capacity, the job count, the status sentence), called by both `bsm` and `blackwell_sm.*`.
Above the planner, which stays pure; imports the container's `train/` only inside functions, for
traces. `plan.py`: plans and traces; `spec_input.py`: the spec and the common flags; `facts.py`:
the job count and the status sentence."""

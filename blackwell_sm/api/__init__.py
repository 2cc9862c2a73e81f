"""The notebook front door: one decider per question (a plan, a traced plan, whether a run fits
a capacity, the job count), called by both `bsm` and `blackwell_sm.*`. Above the planner, which
stays pure; imports the container's `train/` only inside functions, for traces."""

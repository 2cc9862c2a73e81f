"""What reads finished runs: a run folder's or a job's records (`read.py`), `bsm calibrate`
(`calibrate_sources.py`: runs, CSVs and jobs as fit rows; `calibrate.py`: the fit and the
profile) and `bsm report` (`report.py`). Client side: never imports torch."""

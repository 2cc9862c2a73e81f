"""The example specs `bsm init` writes (`*.yaml`, package data): this folder ships inside the
package as `blackwell_sm/templates/` (pyproject.toml's package-dir), and `spec/starter.py` reads
it as `blackwell_sm.templates`."""

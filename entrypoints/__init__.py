"""The container's entrypoint: `entrypoints/` at the repository's top, shipped inside the package
as `blackwell_sm/entrypoints/` (pyproject.toml's package-dir; so a wheel install submits as a
clone does): `python blackwell_sm/entrypoints/launch.py --plan plan.json --opt-ml /opt/ml` runs
as a script from the unpacked code bundle. `bootstrap.py` is standard library only and is
imported as a script's sibling, before anything of ours; nothing here is imported by the client.
"""

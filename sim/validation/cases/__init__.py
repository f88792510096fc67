"""Shoal's own validation cases: importing this package registers them in
`shoal.validation.CASES` (one module per case)."""

import importlib

MODULES = ("cascades", "herd_effect", "backfire", "group_polarization")

for _module in MODULES:
    importlib.import_module(f"shoal.validation.cases.{_module}")

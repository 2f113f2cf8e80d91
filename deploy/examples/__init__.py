"""The example manifests, as package data of `drasat.examples` (no code).

This file makes the folder a package, so `drasat demo` finds the examples with
importlib.resources in an installed wheel and in an editable install alike.
"""

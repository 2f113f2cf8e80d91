"""The shipped allocation policies, as package data of `drasat.policies` (no code).

This file makes the folder a package, so `drasat.policyfiles` finds the policies with
importlib.resources in an installed wheel and in an editable install alike.
"""

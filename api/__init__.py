"""API types of drasat: pydantic models of every object the parts exchange.

This package is pure: it imports nothing of drasat and no library but pydantic.
"""

"""Offline what-if: manifests and a cluster in, placements and explanations out."""

"""The `drasat` command line (also installed as the kubectl plugin `kubectl-drasat`)."""

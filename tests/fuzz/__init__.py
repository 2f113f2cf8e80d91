"""A mutation fuzzer over drasat's input paths (issue 18); see tests/fuzz/__main__.py."""

"""drasat: a Kubernetes DRA driver for NVIDIA GPUs whose allocator is a CP-SAT constraint solver."""

__all__ = ["DRIVER_NAME", "__version__"]

__version__ = "0.1.0"

#: The DRA driver name, also the ResourceClass name the Helm chart installs.
DRIVER_NAME = "gpu.drasat.io"

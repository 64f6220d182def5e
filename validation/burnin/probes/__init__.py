"""Probes: the code that touches one kind of hardware or library (NVML, PyTorch CUDA, NCCL, the
host's sysfs and tools, storage I/O, the CPU all-reduce). Backends compose them; checks never call
them directly. Heavy libraries are imported on first use.
"""

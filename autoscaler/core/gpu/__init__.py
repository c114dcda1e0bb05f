"""Shared GPUs as the NVIDIA stack expresses them: KAI Scheduler's GPU shares and its own pods (``share``,
``kai_pods``), MIG profiles and layouts (``mig``), and the device plugin's time-slicing and MPS configs
(``device_plugin``). Pure readers: no I/O, no clock; what they read and where each rule comes from is in
docs/gpu-sharing.md.
"""

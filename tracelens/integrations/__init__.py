"""Recording from inside a program, where users already are: a context manager for
hand-written loops (`tracelens.record`), a Lightning callback and a transformers
`TrainerCallback`. Each records steps N-M with `tracelens capture`'s settings (CPU and GPU
activity, shapes, Python stacks, every thread, the NVML sampler) into one trace and writes
the report when the recording ends.

Nothing here imports torch or a framework until the integration is used:

    from tracelens.integrations.lightning import TracelensCallback      # lightning
    from tracelens.integrations.transformers import TracelensTrainerCallback
"""

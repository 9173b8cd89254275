"""Atomic, verified checkpoints with exact resume, and graceful preemption (see docs/reliability.md)."""

from mnframe._internal.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "attach": "mnframe.checkpoint.attach:attach",
        "CheckpointConfig": "mnframe.config.schema_checkpoint:CheckpointConfig",
        "CheckpointExtension": "mnframe.checkpoint.extension:CheckpointExtension",
        "CheckpointStore": "mnframe.checkpoint.store:CheckpointStore",
        "export_models": "mnframe.checkpoint.export:export_models",
        "load_model": "mnframe.checkpoint.model_files:load_model",
        "load_params": "mnframe.checkpoint.model_files:load_params",
        "Manifest": "mnframe.checkpoint.manifest:Manifest",
        "resume": "mnframe.checkpoint.resume:resume",
    },
)

"""What is trained: built-in models and datasets, user plugins (`module:callable`), worker batches."""
from psgd.tasks.contract import DatasetContractError
from psgd.tasks.loaders import worker_batches
from psgd.tasks.registry import (
    MLP,
    SmallCNN,
    Task,
    TaskShape,
    build_model,
    load_task,
    resolve_callable,
    task_shape,
)

__all__ = ["Task", "TaskShape", "DatasetContractError", "load_task", "task_shape", "build_model", "worker_batches",
           "resolve_callable", "MLP", "SmallCNN"]

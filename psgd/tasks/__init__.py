"""What is trained: built-in models and datasets, user plugins (`module:callable`), worker batches."""
from psgd.tasks.registry import MLP, SmallCNN, Task, build_model, load_task, resolve_callable, worker_batches

__all__ = ["Task", "load_task", "build_model", "worker_batches", "resolve_callable", "MLP", "SmallCNN"]

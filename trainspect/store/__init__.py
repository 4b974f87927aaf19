"""The run-directory format: layout, writers, readers and the Trial."""

from trainspect.store.layout import FORMAT_VERSION, RunLayout

__all__ = ["FORMAT_VERSION", "RunLayout"]

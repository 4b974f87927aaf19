"""TensorBoard plugin: Profiler and Rules views of trainspect run directories (``tensorboard --logdir runs``)."""

from trainspect.tb_plugin.metadata import PLUGIN_NAME
from trainspect.tb_plugin.plugin import TrainspectPlugin

__all__ = ["PLUGIN_NAME", "TrainspectPlugin"]

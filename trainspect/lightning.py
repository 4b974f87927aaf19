"""Lightning integration: ``trainspect.lightning.TrainspectCallback`` (importing this module imports Lightning).

Every ``Trainer`` already gets one through Lightning's ``callbacks_factory`` entry point; pass your own to bind a
given hook. See :mod:`trainspect.hooks.integrations._lightning_driver`.
"""

from trainspect.hooks.integrations.lightning import TrainspectCallback

__all__ = ["TrainspectCallback"]

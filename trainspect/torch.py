"""PyTorch integration: ``trainspect.torch.Hook`` (importing this module imports torch)."""

from trainspect.hooks.torch_hook import Hook

__all__ = ["Hook"]

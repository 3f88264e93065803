"""Keras callbacks for distributed training (shipped as ``kerashvd.callbacks``)."""

__all__ = []

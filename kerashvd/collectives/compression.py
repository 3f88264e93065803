"""Gradient compression applied around allreduce (``kerashvd.Compression``)."""

import tensorflow as tf


class Compressor:
    """Interface: ``compress`` before communication, ``decompress`` after."""

    @staticmethod
    def compress(tensor):
        """Returns ``(compressed_tensor, context)``."""
        raise NotImplementedError

    @staticmethod
    def decompress(tensor, context):
        """Returns the tensor restored from ``compress``'s output and context."""
        raise NotImplementedError


class NoneCompressor(Compressor):
    """Sends tensors as they are."""

    @staticmethod
    def compress(tensor):
        return tensor, None

    @staticmethod
    def decompress(tensor, context):
        return tensor


class _CastCompressor(Compressor):
    wire_dtype = None

    @classmethod
    def compress(cls, tensor):
        dtype = tensor.dtype
        if dtype.is_floating and dtype != cls.wire_dtype:
            return tf.cast(tensor, cls.wire_dtype), dtype
        return tensor, dtype

    @staticmethod
    def decompress(tensor, context):
        return tensor if tensor.dtype == context else tf.cast(tensor, context)


class FP16Compressor(_CastCompressor):
    """Casts floating-point tensors to float16 for the collective: MPI or NCCL sends and sums
    them as float16, half the bytes of float32, and the result is cast back. Sums past
    float16's range (65504) are infinite; ``bf16`` keeps float32's range."""

    wire_dtype = tf.float16


class BF16Compressor(_CastCompressor):
    """Casts floating-point tensors to bfloat16 for the collective: MPI or NCCL sends and sums
    them as bfloat16, half the bytes of float32 with float32's range and 8 significant bits,
    and the result is cast back."""

    wire_dtype = tf.bfloat16


class Compression:
    """Compression choices: ``Compression.none``, ``Compression.fp16``, ``Compression.bf16``.

    Example:

    >>> import kerashvd as hvd
    >>> hvd.Compression.fp16.compress(tf.constant([1.0]))[0].dtype
    tf.float16
    """

    none = NoneCompressor
    fp16 = FP16Compressor
    bf16 = BF16Compressor

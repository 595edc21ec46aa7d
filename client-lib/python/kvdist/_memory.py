# SPDX-License-Identifier: MIT
"""Arrays and tensors over kvdist memory: what register_cache() and register_blocks_cache()
take the addresses of. The memory comes from kvd_mem_alloc(): shared with kvdistd, zero-filled,
never copied; an array keeps it alive and it is freed with the last array (or tensor) over it."""

import math

from . import _datadist
from ._types import DataType

# DataType -> the numpy dtype name holding it (bfloat16 has none: its bits as uint16).
_NUMPY_NAMES = {
    DataType.DT_FLOAT: "float32", DataType.DT_FLOAT16: "float16", DataType.DT_BF16: "uint16",
    DataType.DT_INT8: "int8", DataType.DT_INT16: "int16", DataType.DT_UINT16: "uint16",
    DataType.DT_UINT8: "uint8", DataType.DT_INT32: "int32", DataType.DT_INT64: "int64",
    DataType.DT_UINT32: "uint32", DataType.DT_UINT64: "uint64", DataType.DT_BOOL: "bool",
    DataType.DT_DOUBLE: "float64",
}


def _owner(datadist):
    if datadist is not None:
        return datadist
    alive = list(_datadist._initialized)
    if len(alive) != 1:
        raise ValueError(f"{len(alive)} LLMDataDist are initialized in this process; "
                         "pass datadist= to say whose memory this is")
    return alive[0]


def _shape(shape):
    if isinstance(shape, int):
        return (shape,)
    return tuple(int(d) for d in shape)


def empty(shape, dtype="float32", *, datadist=None):
    """A numpy array of shape and dtype (numpy's, or a DataType) over new kvdist memory of the
    initialized LLMDataDist (datadist=, or the only one in this process). Zero-filled."""
    import numpy

    if isinstance(dtype, DataType):
        if dtype not in _NUMPY_NAMES:
            raise TypeError(f"kvdist has no memory of {dtype.name}: it moves tensors of "
                            "fixed-size elements")
        dtype = _NUMPY_NAMES[dtype]
    dt = numpy.dtype(dtype)
    shape = _shape(shape)
    count = math.prod(shape)
    if count < 0 or any(d < 0 for d in shape):
        raise ValueError(f"negative dimensions in {shape}")
    mem = _owner(datadist)._c().mem_alloc(max(count * dt.itemsize, 1))
    return numpy.frombuffer(mem, dtype=dt, count=count).reshape(shape)


def empty_torch(shape, dtype=None, *, datadist=None):
    """As empty(), a torch.Tensor (dtype a torch.dtype or a DataType; float32 by default). The
    tensor shares the array's memory (torch.from_numpy) and keeps it alive."""
    import torch

    if dtype is None:
        dtype = torch.float32
    if isinstance(dtype, DataType):
        if dtype not in _torch_dtypes():
            raise TypeError(f"torch has no dtype for {dtype.name}")
        dtype = _torch_dtypes()[dtype]
    if dtype == torch.bfloat16:
        # numpy has no bfloat16 and torch.from_numpy() no uint16: the bits travel as int16.
        return torch.from_numpy(empty(shape, "int16", datadist=datadist)).view(torch.bfloat16)
    numpy_name = str(dtype).removeprefix("torch.")
    if numpy_name not in _NUMPY_NAMES.values():
        raise TypeError(f"kvdist has no data type for {dtype}")
    return torch.from_numpy(empty(shape, numpy_name, datadist=datadist))


def _torch_dtypes():
    import torch

    return {
        DataType.DT_FLOAT: torch.float32, DataType.DT_FLOAT16: torch.float16,
        DataType.DT_BF16: torch.bfloat16, DataType.DT_INT8: torch.int8,
        DataType.DT_INT16: torch.int16, DataType.DT_UINT8: torch.uint8,
        DataType.DT_INT32: torch.int32, DataType.DT_INT64: torch.int64,
        DataType.DT_BOOL: torch.bool, DataType.DT_DOUBLE: torch.float64,
    }


def register_memory(array, fd, offset=0, *, datadist=None):
    """Registers memory the engine allocated itself: @array (a numpy array or torch tensor,
    C-contiguous) must lie over bytes [offset, offset + array's bytes) of the memfd @fd, which
    the engine mapped and sealed against shrinking (os.memfd_create(..., os.MFD_ALLOW_SEALING),
    then fcntl F_SEAL_SHRINK). Caches registered over the array then move like kvdist memory,
    without a copy. Returns the registration's id for unregister_memory(); the engine keeps
    its mapping, which kvdist never unmaps. LLMException with LLM_PARAM_INVALID for a fd that
    is not a sealed memfd, a range past its end or an unaligned offset."""
    address, nbytes = _address_and_size(array)
    return _owner(datadist)._c().mem_register(int(fd), int(offset), nbytes, address)


def unregister_memory(mem_id, *, datadist=None):
    """Forgets memory from register_memory() (LLM_BUSY while a registered cache lies in it)."""
    _owner(datadist)._c().mem_unregister(int(mem_id))


def _address_and_size(array):
    if hasattr(array, "data_ptr") and hasattr(array, "element_size"):  # torch.Tensor
        if not array.is_contiguous():
            raise ValueError("the tensor is not contiguous")
        return array.data_ptr(), array.numel() * array.element_size()
    import numpy

    if not isinstance(array, numpy.ndarray):
        raise TypeError(f"register_memory() takes a numpy array or a torch tensor, not "
                        f"{type(array).__name__}")
    if not array.flags["C_CONTIGUOUS"]:
        raise ValueError("the array is not C-contiguous")
    return array.ctypes.data, array.nbytes

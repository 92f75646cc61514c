"""Exceptions: Fa2Error and one subclass per fa2_status_t, plus the binding's own."""
from ._cdefs import STATUS_NAMES

class Fa2Error(Exception):
    """A libfa2 call failed. `status` is the fa2_status_t value (None for errors the
    binding found itself), `message` the library's fa2_last_error() text, `function`
    the C function that failed."""

    status = None

    def __init__(self, message, status=None, function=None):
        if status is not None:
            self.status = status
        self.message = message
        self.function = function
        where = f"{function}: " if function else ""
        name = STATUS_NAMES.get(self.status, f"status {self.status}")
        tail = f" [{name}]" if self.status is not None else ""
        super().__init__(f"{where}{message}{tail}")

    @property
    def status_name(self):
        return STATUS_NAMES.get(self.status)


def _status_class(code, name, doc):
    return type(name, (Fa2Error,), {"status": code, "__doc__": doc, "__module__": __name__})


Fa2NullPointer = _status_class(1, "Fa2NullPointer", "a required pointer is NULL")
Fa2StructSize = _status_class(2, "Fa2StructSize", "struct_size unknown to the library")
Fa2InvalidSize = _status_class(3, "Fa2InvalidSize", "batch/seqlen/heads out of range")
Fa2SizeOverflow = _status_class(4, "Fa2SizeOverflow", "an extent does not fit in int64")
Fa2UnsupportedDtype = _status_class(5, "Fa2UnsupportedDtype", "dtype not fp16/bf16")
Fa2UnsupportedHeadDim = _status_class(6, "Fa2UnsupportedHeadDim",
                                      "head_dim not a multiple of 8 in [8, 256]")
Fa2HeadsMismatch = _status_class(7, "Fa2HeadsMismatch", "heads_q not a multiple of heads_kv")
Fa2BadStride = _status_class(8, "Fa2BadStride", "negative stride or not a multiple of 8")
Fa2Misaligned = _status_class(9, "Fa2Misaligned", "a pointer is not 16-byte aligned")
Fa2BadWindow = _status_class(10, "Fa2BadWindow", "bad window_left/right or causal")
Fa2BadScale = _status_class(11, "Fa2BadScale", "softmax_scale negative, NaN or infinite")
Fa2UnsupportedDevice = _status_class(12, "Fa2UnsupportedDevice",
                                     "compute capability below 8.0")
Fa2SharedMemory = _status_class(13, "Fa2SharedMemory", "tiles do not fit shared memory")
Fa2Workspace = _status_class(14, "Fa2Workspace", "workspace missing or too small")
Fa2NoDevice = _status_class(15, "Fa2NoDevice", "no CUDA device, or a bad device index")
Fa2CudaError = _status_class(16, "Fa2CudaError", "the CUDA runtime reported an error")
Fa2Overlap = _status_class(17, "Fa2Overlap", "an output overlaps an input, another output "
                           "or itself (a layout with repeated addresses)")
Fa2BadPlan = _status_class(18, "Fa2BadPlan", "the plan was changed after fa2_plan made it")
Fa2DeviceMismatch = _status_class(19, "Fa2DeviceMismatch",
                                  "the current device is not the one the plan was made for")
Fa2Reserved = _status_class(20, "Fa2Reserved", "a reserved field is not zero")
Fa2Unsupported = _status_class(21, "Fa2Unsupported", "a combination this version does not run")
Fa2BadMetadata = _status_class(22, "Fa2BadMetadata",
                               "a packed batch's device metadata failed a check")

_EXCEPTIONS = {cls.status: cls for cls in (
    Fa2NullPointer, Fa2StructSize, Fa2InvalidSize, Fa2SizeOverflow, Fa2UnsupportedDtype,
    Fa2UnsupportedHeadDim, Fa2HeadsMismatch, Fa2BadStride, Fa2Misaligned, Fa2BadWindow,
    Fa2BadScale, Fa2UnsupportedDevice, Fa2SharedMemory, Fa2Workspace, Fa2NoDevice,
    Fa2CudaError, Fa2Overlap, Fa2BadPlan, Fa2DeviceMismatch, Fa2Reserved, Fa2Unsupported,
    Fa2BadMetadata)}



class Fa2ShapeError(Fa2Error, ValueError):
    """The binding refused the call before reaching libfa2: tensor shapes, dtypes or
    devices that disagree, a head_dim stride other than 1, or a tensor whose strides
    reach past its storage."""


class Fa2LibraryNotFound(Fa2Error, OSError):
    """libfa2.so could not be found or loaded."""


def exception_for(status, message, function=None):
    """The Fa2Error subclass instance for a status code (Fa2Error for unknown codes)."""
    return _EXCEPTIONS.get(status, Fa2Error)(message, status=status, function=function)

__all__ = ["Fa2Error", "Fa2ShapeError", "Fa2LibraryNotFound", "exception_for"] + [
    cls.__name__ for cls in _EXCEPTIONS.values()]


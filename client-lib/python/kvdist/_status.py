# SPDX-License-Identifier: MIT
"""Status codes and the exception every failed call raises, as llm_datadist names them."""

import enum

from . import _kvdist


class LLMStatusCode(enum.IntEnum):
    """llm_datadist's status codes, then those kvdist adds (its daemon, its limits)."""

    LLM_SUCCESS = 0
    LLM_FAILED = 1
    LLM_WAIT_PROCESS_TIMEOUT = 2
    LLM_KV_CACHE_NOT_EXIST = 3
    LLM_REPEAT_REQUEST = 4
    LLM_REQUEST_ALREADY_COMPLETED = 5
    LLM_PARAM_INVALID = 6
    LLM_ENGINE_FINALIZED = 7
    LLM_NOT_YET_LINK = 8
    LLM_ALREADY_LINK = 9
    LLM_LINK_FAILED = 10
    LLM_UNLINK_FAILED = 11
    LLM_NOTIFY_PROMPT_UNLINK_FAILED = 12
    LLM_CLUSTER_NUM_EXCEED_LIMIT = 13
    LLM_PROCESSING_LINK = 14
    LLM_DEVICE_OUT_OF_MEMORY = 15
    LLM_PREFIX_ALREADY_EXIST = 16
    LLM_PREFIX_NOT_EXIST = 17
    LLM_SEQ_LEN_OVER_LIMIT = 18
    LLM_NO_FREE_BLOCK = 19
    LLM_BLOCKS_OUT_OF_MEMORY = 20
    LLM_CACHE_INCOMPATIBLE = 21
    LLM_CACHE_KEY_ALREADY_EXIST = 22
    LLM_COPY_CACHE_FAILED = 23
    LLM_CACHE_ID_ALREADY_EXIST = 24
    LLM_EXIST_LINK = 25
    LLM_FEATURE_NOT_ENABLED = 26
    LLM_TIMEOUT = 27
    LLM_LINK_BUSY = 28
    LLM_OUT_OF_MEMORY = 29
    # llm_datadist's value (-1, not a status of its wrapper's); what a libkvdist status this
    # package does not know (a newer daemon's) becomes. No KVD_E_* status maps to it, and
    # nothing maps an LLMStatusCode back to a libkvdist status by its value.
    LLM_UNKNOWN_ERROR = -1
    # llm_datadist's device faults: kvdist has no device memory and never returns them; they
    # exist for code that compares with them.
    LLM_DEVICE_MEM_ERROR = 31
    LLM_SUSPECT_REMOTE_ERROR = 32
    # llm_datadist's spelling of LLM_SEQ_LEN_OVER_LIMIT (an alias: the same member).
    LLM_SEQ_LENOVERLIMIT = 18
    # kvdist's own
    LLM_NOT_INITIALIZED = 100
    LLM_CLUSTER_EXISTS = 101
    LLM_LIMIT_EXCEEDED = 102
    LLM_UNSUPPORTED = 103
    LLM_DAEMON_UNAVAILABLE = 104
    LLM_PEER_LOST = 105
    LLM_PERMISSION_DENIED = 106
    LLM_PROTOCOL_MISMATCH = 107
    LLM_BUSY = 108
    LLM_IN_PROGRESS = 109  # not a failure: the task still runs (CacheTask.wait(0))
    LLM_CANCELLED = 110    # CacheTask.cancel() stopped the transfer

    def __str__(self):
        return f"{type(self).__name__}.{self.name}"  # as llm_datadist prints it


# libkvdist's statuses (kvd_strerror() names) and what each one is here. A status libkvdist
# gains must be added: the tests check that every one it knows has an entry.
_BY_KVD_NAME = {
    "KVD_OK": LLMStatusCode.LLM_SUCCESS,
    "KVD_E_FAILED": LLMStatusCode.LLM_FAILED,
    "KVD_E_PARAM_INVALID": LLMStatusCode.LLM_PARAM_INVALID,
    "KVD_E_TIMEOUT": LLMStatusCode.LLM_TIMEOUT,
    "KVD_E_CACHE_NOT_EXIST": LLMStatusCode.LLM_KV_CACHE_NOT_EXIST,
    "KVD_E_NOT_YET_LINK": LLMStatusCode.LLM_NOT_YET_LINK,
    "KVD_E_ALREADY_LINK": LLMStatusCode.LLM_ALREADY_LINK,
    "KVD_E_LINK_FAILED": LLMStatusCode.LLM_LINK_FAILED,
    "KVD_E_UNLINK_FAILED": LLMStatusCode.LLM_UNLINK_FAILED,
    "KVD_E_CLUSTER_NUM_EXCEED_LIMIT": LLMStatusCode.LLM_CLUSTER_NUM_EXCEED_LIMIT,
    "KVD_E_PROCESSING_LINK": LLMStatusCode.LLM_PROCESSING_LINK,
    "KVD_E_OUT_OF_MEMORY": LLMStatusCode.LLM_OUT_OF_MEMORY,
    "KVD_E_EXIST_LINK": LLMStatusCode.LLM_EXIST_LINK,
    "KVD_E_FEATURE_NOT_ENABLED": LLMStatusCode.LLM_FEATURE_NOT_ENABLED,
    "KVD_E_LINK_BUSY": LLMStatusCode.LLM_LINK_BUSY,
    "KVD_E_CACHE_KEY_ALREADY_EXIST": LLMStatusCode.LLM_CACHE_KEY_ALREADY_EXIST,
    "KVD_E_CACHE_ID_ALREADY_EXIST": LLMStatusCode.LLM_CACHE_ID_ALREADY_EXIST,
    "KVD_E_NOT_INITIALIZED": LLMStatusCode.LLM_NOT_INITIALIZED,
    "KVD_E_CLUSTER_EXISTS": LLMStatusCode.LLM_CLUSTER_EXISTS,
    "KVD_E_CACHE_INCOMPATIBLE": LLMStatusCode.LLM_CACHE_INCOMPATIBLE,
    "KVD_E_LIMIT_EXCEEDED": LLMStatusCode.LLM_LIMIT_EXCEEDED,
    "KVD_E_UNSUPPORTED": LLMStatusCode.LLM_UNSUPPORTED,
    "KVD_E_DAEMON_UNAVAILABLE": LLMStatusCode.LLM_DAEMON_UNAVAILABLE,
    "KVD_E_PEER_LOST": LLMStatusCode.LLM_PEER_LOST,
    "KVD_E_PERMISSION_DENIED": LLMStatusCode.LLM_PERMISSION_DENIED,
    "KVD_E_PROTOCOL_MISMATCH": LLMStatusCode.LLM_PROTOCOL_MISMATCH,
    "KVD_E_BUSY": LLMStatusCode.LLM_BUSY,
    "KVD_E_IN_PROGRESS": LLMStatusCode.LLM_IN_PROGRESS,
    "KVD_E_CANCELLED": LLMStatusCode.LLM_CANCELLED,
}


def status_code(kvd_status):
    """The LLMStatusCode of a libkvdist status; LLM_UNKNOWN_ERROR for one this package does not
    know (a newer daemon's), LLM_ENGINE_FINALIZED for a call on a finalized instance."""
    if kvd_status == _kvdist.FINALIZED:
        return LLMStatusCode.LLM_ENGINE_FINALIZED
    return _BY_KVD_NAME.get(_kvdist.strerror(kvd_status), LLMStatusCode.LLM_UNKNOWN_ERROR)


class LLMException(RuntimeError):
    """A call failed: llm_datadist's LLMException(*args, status_code=...), a RuntimeError whose
    status_code is the LLMStatusCode. kvdist's own: kvd_status, the libkvdist status behind it
    (a negative KVD_E_* code, None when the package raised it itself), and message, the detail
    (the first argument)."""

    def __init__(self, *args, status_code=LLMStatusCode.LLM_SUCCESS, kvd_status=None):
        super().__init__(*args)
        try:
            status_code = LLMStatusCode(status_code)
        except ValueError:
            pass  # llm_datadist keeps what it is given
        self._status_code = status_code
        self.kvd_status = kvd_status
        self.message = str(args[0]) if args else ""

    @property
    def status_code(self):
        return self._status_code

    @classmethod
    def _from_kvd(cls, kvd_status, detail):
        return _error(status_code(kvd_status), detail, kvd_status)


def _error(code, message="", kvd_status=None):
    """The LLMException kvdist raises: its text names the code (and the KVD_E_* status), then
    the detail; message is the detail alone."""
    code = LLMStatusCode(code)
    text = code.name
    if kvd_status is not None and kvd_status <= 0:
        text += f" ({_kvdist.strerror(kvd_status)})"
    e = LLMException(f"{text}: {message}" if message else text, status_code=code,
                     kvd_status=kvd_status)
    e.message = message
    return e


class Status:
    """llm_datadist's wrapper of a status code: is_ok() and status_code."""

    def __init__(self, status):
        self._status_code = status

    def is_ok(self):
        return self._status_code == LLMStatusCode.LLM_SUCCESS

    @property
    def status_code(self):
        return self._status_code

    def __repr__(self):
        return f"Status({self._status_code!r})"


def code_2_status(status):
    """llm_datadist's status.code_2_status(): the LLMStatusCode of a status of the library
    underneath (here libkvdist's, a KVD_E_* code); LLM_FAILED for one it does not know, as
    there."""
    if status == _kvdist.FINALIZED:
        return LLMStatusCode.LLM_ENGINE_FINALIZED
    return _BY_KVD_NAME.get(_kvdist.strerror(status), LLMStatusCode.LLM_FAILED)


def handle_llm_status(status, func_name, other_info):
    """llm_datadist's status.handle_llm_status(): raises LLMException unless status (a
    libkvdist status) is KVD_OK."""
    if status != 0:
        code = code_2_status(status)
        raise LLMException(f"{func_name} failed, error code is {code}, {other_info}.",
                           status_code=code, kvd_status=status)


def raise_if_false(pred, fmt, *args, status_code=LLMStatusCode.LLM_PARAM_INVALID, **kwargs):
    """llm_datadist's status.raise_if_false(): LLMException(fmt.format(*args, **kwargs),
    status_code=status_code) unless pred."""
    if not pred:
        raise LLMException(fmt.format(*args, **kwargs), status_code=status_code)


def raise_if_true(pred, fmt, *args, status_code=LLMStatusCode.LLM_PARAM_INVALID, **kwargs):
    """llm_datadist's status.raise_if_true(): LLMException(fmt.format(*args, **kwargs),
    status_code=status_code) if pred."""
    if pred:
        raise LLMException(fmt.format(*args, **kwargs), status_code=status_code)


_kvdist._set_error_factory(LLMException._from_kvd)

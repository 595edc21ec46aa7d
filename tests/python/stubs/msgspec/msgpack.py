# SPDX-License-Identifier: MIT
"""msgspec.msgpack's Encoder and Decoder over JSON: the connector only sends structs, enums,
lists, strings and ints, and reads them back untyped (a struct as a dict)."""

import enum
import json


def _plain(obj):
    from . import Struct
    if isinstance(obj, Struct):
        return {f: _plain(getattr(obj, f)) for f in obj.__struct_fields__}
    if isinstance(obj, enum.Enum):
        return _plain(obj.value)
    if isinstance(obj, (list, tuple)):
        return [_plain(o) for o in obj]
    if isinstance(obj, dict):
        return {k: _plain(v) for k, v in obj.items()}
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"msgspec stub: cannot encode {type(obj).__name__}")


class Encoder:
    def encode(self, obj):
        return json.dumps(_plain(obj)).encode()


class Decoder:
    def decode(self, data):
        return json.loads(bytes(data))

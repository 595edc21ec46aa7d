# SPDX-License-Identifier: MIT
"""msgspec's Struct (keyword construction, equality) and msgspec.msgpack, as the connector uses
them: structs are encoded as their fields' dict and decoded as a dict, enums as their value."""

from . import msgpack  # noqa: F401


class Struct:
    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        fields = []
        for klass in reversed(cls.__mro__):
            for name in getattr(klass, "__annotations__", {}):
                if name not in fields:
                    fields.append(name)
        cls.__struct_fields__ = tuple(fields)

    def __init__(self, *args, **kwargs):
        fields = self.__struct_fields__
        if len(args) > len(fields):
            raise TypeError("too many positional arguments")
        values = dict(zip(fields, args))
        for name, value in kwargs.items():
            if name not in fields or name in values:
                raise TypeError(f"unexpected or repeated field {name!r}")
            values[name] = value
        missing = [f for f in fields if f not in values]
        if missing:
            raise TypeError(f"missing required fields {missing}")
        for name in fields:
            setattr(self, name, values[name])

    def __eq__(self, other):
        return type(self) is type(other) and all(
            getattr(self, f) == getattr(other, f) for f in self.__struct_fields__)

    def __repr__(self):
        inner = ", ".join(f"{f}={getattr(self, f)!r}" for f in self.__struct_fields__)
        return f"{type(self).__name__}({inner})"

"""Conversion between generated pydantic models and tool-call JSON.

The modules that ``pygen`` generates define their ``Params`` and ``Result``
models with whatever pydantic the kernel has: 1.10 (Debian's python3) or 2.x.
This module serves both without importing pydantic, so importing the runtime
stays cheap and works in a kernel that has no pydantic at all. Models are
recognised by duck typing:

- pydantic 2: the class has ``model_fields``; an instance has
  ``model_fields_set`` and ``model_extra``.
- pydantic 1: the class has ``__fields__``; an instance has
  ``__fields_set__``.
"""

import base64
import datetime
import decimal
import enum
import pathlib
import uuid

__all__ = ["dump_params", "validate_result"]


def dump_params(params):
    """Return the tool arguments of ``params`` as a JSON-compatible dict.

    Keys are the schema names (the field aliases), so a field generated as
    ``from_`` reaches the server as ``from``. A field is sent when the caller
    set it (``exclude_unset``), including an explicit ``None``, which means
    ``null``. An unset field is sent only when the schema requires it and
    the generator gave it a default so that callers need not repeat it (a
    ``const`` discriminator): the generated class lists those in
    ``_ipybox_send``. Every other default stays the server's to apply, as in
    a direct call. The same rule applies to nested models.

    Models generated before ``_ipybox_send`` existed keep the older rule:
    an unset field is sent when its default is not None.

    A plain dict is accepted too and passed on.
    """
    if isinstance(params, dict):
        return {str(k): _jsonable(v, str(k)) for k, v in params.items()}
    if not _is_model(params):
        raise TypeError(
            "tool parameters must be a generated Params model or a dict, not %s"
            % type(params).__name__
        )
    return _dump_model(params, "params")


def validate_result(result_type, data):
    """Return ``result_type`` validated from a tool's structuredContent.

    ``result_type`` is a generated ``Result`` model class; None means the
    tool has no output schema, and ``data`` is returned unchanged.
    """
    if result_type is None:
        return data
    validate = getattr(result_type, "model_validate", None)  # pydantic 2
    if validate is None:
        validate = result_type.parse_obj  # pydantic 1
    return validate(data)


def _is_model(obj):
    cls = type(obj)
    return hasattr(cls, "model_fields") or (
        hasattr(cls, "__fields__") and hasattr(obj, "__fields_set__")
    )


def _fields(model):
    """Yield (attribute name, wire name, was set) for each declared field."""
    cls = type(model)
    if hasattr(cls, "model_fields"):  # pydantic 2
        fields_set = model.model_fields_set
        for name, info in cls.model_fields.items():
            key = info.serialization_alias
            if key is None:
                key = name if info.alias is None else info.alias  # "" is a valid alias
            yield name, key, name in fields_set
    else:  # pydantic 1: ModelField.alias defaults to the field name
        fields_set = model.__fields_set__
        for name, field in cls.__fields__.items():
            yield name, field.alias, name in fields_set


def _extras(model):
    """Return the undeclared fields a model kept (extra="allow")."""
    if hasattr(type(model), "model_fields"):
        return getattr(model, "model_extra", None) or {}
    declared = type(model).__fields__
    return {k: v for k, v in model.__dict__.items() if k not in declared}


def _dump_model(model, path):
    out = {}
    send = getattr(type(model), "_ipybox_send", None)
    for name, key, was_set in _fields(model):
        value = getattr(model, name)
        if not was_set:
            if send is None:  # generated before _ipybox_send
                if value is None:
                    continue
            elif name not in send:
                continue
        out[key] = _jsonable(value, path + "." + key)
    for key, value in _extras(model).items():
        out.setdefault(key, _jsonable(value, path + "." + key))
    return out


def _jsonable(value, path):
    """Convert value to what json.dumps accepts, or raise naming the field."""
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, enum.Enum):
            return _jsonable(value.value, path)
        return value
    if _is_model(value):
        return _dump_model(value, path)
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, path)
    if isinstance(value, dict):
        return {str(k): _jsonable(v, "%s.%s" % (path, k)) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v, "%s[%d]" % (path, i)) for i, v in enumerate(value)]
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, (decimal.Decimal, uuid.UUID, pathlib.PurePath)):
        return str(value)
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(bytes(value)).decode("ascii")
    raise TypeError(
        "%s: a %s cannot be sent as JSON; pass str, int, float, bool, None, "
        "list, dict or a generated model" % (path, type(value).__name__)
    )

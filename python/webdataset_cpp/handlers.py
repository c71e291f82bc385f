"""Error handlers: what a stage does with an error it meets.

A handler receives the exception and returns True (skip the item and go on),
False (end the stage's stream cleanly), or raises (the error ends the
iteration). The five functions below are the reference package's; native
stages recognise them and apply them without calling Python. Any other
callable is called with the exception.

Unlike the reference, the ``warn_*`` handlers do not sleep 0.5 s.

>>> import webdataset_cpp as wds
>>> wds.ignore_and_continue(ValueError("bad"))
True
"""

import warnings


def reraise_exception(exn):
    """Re-raises the exception: the default everywhere."""
    raise exn


def ignore_and_continue(exn):
    """Drops the item silently and goes on."""
    return True


def warn_and_continue(exn):
    """Warns (UserWarning with the exception's repr) and goes on."""
    warnings.warn(repr(exn))
    return True


def ignore_and_stop(exn):
    """Ends the stage's stream silently."""
    return False


def warn_and_stop(exn):
    """Warns and ends the stage's stream."""
    warnings.warn(repr(exn))
    return False


_NATIVE_NAMES = {
    reraise_exception: "reraise",
    ignore_and_continue: "ignore_and_continue",
    warn_and_continue: "warn_and_continue",
    ignore_and_stop: "ignore_and_stop",
    warn_and_stop: "warn_and_stop",
}


def native_name(handler):
    """The native policy name of one of the handlers above, else None."""
    if isinstance(handler, str):
        return handler
    try:
        return _NATIVE_NAMES.get(handler)
    except TypeError:  # an unhashable callable
        return None


def for_native(handler):
    """What a native stage takes: a policy name, or the callable itself."""
    if handler is None:
        return "reraise"
    name = native_name(handler)
    if name is not None:
        return name
    if not callable(handler):
        raise TypeError(f"handler must be callable, got {handler!r}")
    return handler


def apply_handler(handler, exn):
    """Runs `handler` on `exn` in Python: True to go on, False to stop."""
    return bool(handler(exn))

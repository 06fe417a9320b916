"""For the shims: a torch query replaced by one with a fixed answer, which keeps the original's
name and attributes (torch 2.15's dynamo reads ``torch.backends.mps.is_available.__wrapped__``
as it loads: a bare lambda there breaks every script that imports it)."""

import functools
from collections.abc import Callable
from typing import Any


def answering(original: Callable, value: Any) -> Callable:
    @functools.wraps(original)
    def answer(*args: Any, **kwargs: Any) -> Any:
        return value
    return answer

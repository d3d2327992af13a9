"""Waiting for a condition in the client tests, with a message that says
what never happened."""

import time


def wait_until(what: str, check, timeout: float, every: float = 0.3):
    """check()'s first truthy value within `timeout` seconds, else an
    AssertionError naming what never happened and the last value (or
    exception) seen."""
    deadline = time.monotonic() + timeout
    last = None
    while True:
        try:
            got = check()
            if got:
                return got
            last = got
        except Exception as e:  # noqa: BLE001 - retried until the deadline
            last = e
        if time.monotonic() > deadline:
            raise AssertionError(f"never {what} within {timeout}s; last: {last!r}")
        time.sleep(every)

"""The one exception type for bad input from the user."""


class InputError(ValueError):
    """Bad input from the user: the message is one line naming the value and the fix."""


class TooLarge(InputError):
    """A fit too large for its ``max_n`` or for the memory: one job is refused; in a sweep the
    point is recorded as failed with this message while the rest of the sweep runs."""

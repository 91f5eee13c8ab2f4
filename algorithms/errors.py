"""The one exception type for bad input from the user."""


class InputError(ValueError):
    """Bad input from the user: the message is one line naming the value and the fix."""

"""One exception type for bad user input: the CLI turns it into a one-line message."""


class ConfigError(ValueError):
    """A configuration value is invalid.

    ``key`` is the dotted config key (``privacy.epsilons``), ``message`` says what is wrong
    and which values are allowed. ``str(err)`` is the one-line message shown to the user.
    """

    def __init__(self, key: str, message: str):
        self.key = key
        self.message = message
        super().__init__(f"{key}: {message}")

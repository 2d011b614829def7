"""The one exception type the CLI turns into a one-line error and an exit code."""


class OslensError(Exception):
    """A user-facing failure: `message` is one sentence saying what is wrong and what to do."""

    def __init__(self, message: str, exit_code: int = 1):
        super().__init__(message)
        self.exit_code = exit_code

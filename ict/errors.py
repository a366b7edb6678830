"""The one exception type for bad user input; the CLI prints it as one line and exits 2."""


class UsageError(Exception):
    """Bad input from the user (option, file, model id); the message is shown as is."""

"""Errors the command line turns into one line on stderr (never a traceback)."""


class UsageError(Exception):
    """Bad user input (an option, a file, a path): the message names the problem and the fix."""


class TrainingDiverged(Exception):
    """Training stopped after too many consecutive non-finite updates (checkpointed first)."""

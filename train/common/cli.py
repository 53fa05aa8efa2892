"""The command-line contract of train/'s CLIs (standard library only): a user's mistake is one line on stderr,
``error: <what is wrong> (<where>); <how to fix>``, and exit status 2 -- never a traceback, never argparse's usage
block. A bug still ends with its traceback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable


class Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one ``error:`` line naming ``--help`` and exit status 2."""

    def error(self, message):
        self.exit(2, f"error: {message} (command line); see `{self.prog} --help`\n")


def run(work: Callable[[], int | None], *user_errors: type[BaseException]) -> int:
    """Run a CLI's ``work()`` and return its exit status.

    Args:
        work: the command's body; it prints its own output and returns an exit status (None counts as 0).
        user_errors: the exception types that mean a user's mistake (JobError, DataError, ...); their message
            already says what, where and how to fix.

    Returns:
        work()'s status, or 2 after printing ``error: <message>`` on stderr when it raised one of ``user_errors``.
        Any other exception propagates.
    """
    try:
        status = work()
    except user_errors as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0 if status is None else status

"""The ``kiln`` command of the wheel: the same code as the ``kiln`` binary."""

import signal
import sys

from . import _kiln


def main() -> None:
    """Runs ``kiln`` with this process's arguments and exits with its status."""
    # Ctrl-C ends the command at once, as it ends the binary (kiln runs with Python's lock
    # released, so Python's own handler would only run when the command is over).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    sys.exit(_kiln.cli(["kiln", *sys.argv[1:]]))


if __name__ == "__main__":
    main()

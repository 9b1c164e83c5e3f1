"""The command line of the benchmark scripts: whole numbers by position, and
``--help``, which prints the script's docstring."""

from __future__ import annotations

import sys


def exit_if_help_asked(doc: str | None) -> None:
    if any(a in ("-h", "--help") for a in sys.argv[1:]):
        print(doc or "")
        raise SystemExit(0)


def counts(doc: str | None, defaults: list[int]) -> list[int]:
    """The positional whole numbers given, each defaulting to ``defaults``."""
    exit_if_help_asked(doc)
    args = sys.argv[1:]
    try:
        given = [int(a) for a in args]
    except ValueError:
        raise SystemExit(
            f"expected up to {len(defaults)} whole numbers, got {args}; see --help"
        ) from None
    if len(given) > len(defaults) or any(n <= 0 for n in given):
        raise SystemExit(
            f"expected up to {len(defaults)} whole numbers above 0, got {args}; see --help"
        )
    return given + defaults[len(given) :]


def take_option(args: list[str], flag: str) -> str | None:
    """The value given after ``flag`` (both removed from ``args``), or None
    when ``flag`` is not there."""
    if flag not in args:
        return None
    at = args.index(flag)
    if at + 1 >= len(args):
        raise SystemExit(f"{flag} needs a value; see --help")
    value = args[at + 1]
    del args[at : at + 2]
    return value

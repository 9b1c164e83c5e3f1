"""Objects that refuse to be copied or pickled (a Store, a Transaction)."""

from __future__ import annotations

from typing import NoReturn


class Uncopyable:
    """Refuses ``copy.copy``, ``copy.deepcopy`` and ``pickle`` with a TypeError.

    The default copy would share what the object holds rather than copy it: a
    Store's copy shares the open files and index, so closing the copy closes them
    under the original; a Transaction's copy shares its puts, ids included, and
    committing both writes them twice. A subclass says why, and what to do, in
    ``_why_uncopyable``.
    """

    __slots__ = ()
    _why_uncopyable: str

    def _refuse_copy(self) -> NoReturn:
        raise TypeError(
            f"a msgcask {type(self).__name__} cannot be copied or pickled: {self._why_uncopyable}"
        )

    def __copy__(self) -> NoReturn:
        self._refuse_copy()

    def __deepcopy__(self, memo: object) -> NoReturn:
        self._refuse_copy()

    def __reduce_ex__(self, protocol: object) -> NoReturn:
        self._refuse_copy()

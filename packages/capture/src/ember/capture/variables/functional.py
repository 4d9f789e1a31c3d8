"""`functools.partial` objects and the `itertools` basics (`chain`, `product`,
`zip_longest`), modelled over Variables: a partial remembers its function and bound
arguments; the itertools functions build iterators of the values they would yield.
"""

from __future__ import annotations

import functools
import itertools
from typing import TYPE_CHECKING, Any

from ember.capture.unsupported import Unsupported
from ember.capture.variables.base import Variable
from ember.capture.variables.builtins import BUILTINS
from ember.capture.variables.constant import ConstantVariable
from ember.capture.variables.containers import IteratorVariable, TupleVariable

if TYPE_CHECKING:
    from ember.capture.bytecode.frame import Frame


class PartialVariable(Variable):
    """`functools.partial(fn, *args, **kwargs)`."""

    def __init__(
        self,
        function: Variable,
        args: list[Variable],
        kwargs: dict[str, Variable],
        source: Any = None,
    ) -> None:
        self.function = function
        self.args = args
        self.kwargs = kwargs
        self.source = source

    def python_type(self) -> type:
        return functools.partial

    def describe(self) -> str:
        return f"functools.partial of {self.function.describe()}"

    def call(self, frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
        return self.function.call(frame, [*self.args, *args], {**self.kwargs, **kwargs})

    def getattr(self, frame: Frame, name: str) -> Variable:
        if name == "func":
            return self.function
        if name == "args":
            return TupleVariable(list(self.args))
        return super().getattr(frame, name)


def _partial(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    if not args:
        raise Unsupported("functools.partial() without a function (TypeError)")
    function, *bound = args
    if isinstance(function, PartialVariable):  # partial of a partial flattens, as in Python
        return PartialVariable(
            function.function, [*function.args, *bound], {**function.kwargs, **kwargs}
        )
    return PartialVariable(function, bound, kwargs)


def _chain(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    return IteratorVariable([item for arg in args for item in arg.items(frame)])


def _chain_from_iterable(
    frame: Frame, args: list[Variable], kwargs: dict[str, Variable]
) -> Variable:
    return IteratorVariable([item for arg in args[0].items(frame) for item in arg.items(frame)])


def _product(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    repeat = kwargs["repeat"].constant() if "repeat" in kwargs else 1
    pools = [arg.items(frame) for arg in args] * repeat
    return IteratorVariable([TupleVariable(list(row)) for row in itertools.product(*pools)])


def _zip_longest(frame: Frame, args: list[Variable], kwargs: dict[str, Variable]) -> Variable:
    fill = kwargs.get("fillvalue", ConstantVariable(None))
    columns = [arg.items(frame) for arg in args]
    rows = itertools.zip_longest(*columns, fillvalue=fill)
    return IteratorVariable([TupleVariable(list(row)) for row in rows])


BUILTINS[functools.partial] = _partial
BUILTINS[itertools.chain] = _chain
BUILTINS[itertools.chain.from_iterable] = _chain_from_iterable
BUILTINS[itertools.product] = _product
BUILTINS[itertools.zip_longest] = _zip_longest

"""Deliberate "unsupported" entries: opcodes capture does not model yet, each naming the
construct so the error tells the user what to change. Graph breaks (issue 5) replace most.
"""

from __future__ import annotations

from ember.capture.bytecode.registry import unsupported

PY311 = ((3, 11),)
PY312 = ((3, 12),)

# Reached only when an exception is raised, which capture never does.
unsupported(
    (
        "PUSH_EXC_INFO",
        "POP_EXCEPT",
        "RERAISE",
        "WITH_EXCEPT_START",
        "CHECK_EXC_MATCH",
        "CHECK_EG_MATCH",
        "PREP_RERAISE_STAR",
        "CLEANUP_THROW",
        "END_ASYNC_FOR",
    ),
    "exception handling paths (an exception raised inside the compiled function)",
)
unsupported(("RAISE_VARARGS",), "raising an exception (or a failing assert)", kind="raise")
unsupported(("LOAD_ASSERTION_ERROR",), "a failing assert", kind="raise")
unsupported(("IMPORT_STAR",), "import statements", kind="import")
unsupported(("LOAD_BUILD_CLASS",), "defining a class")
unsupported(("SETUP_ANNOTATIONS",), "annotations at module level")
unsupported(
    (
        "LOAD_NAME",
        "STORE_NAME",
        "DELETE_NAME",
        "LOAD_CLASSDEREF",
        "LOAD_FROM_DICT_OR_DEREF",
        "LOAD_FROM_DICT_OR_GLOBALS",
        "LOAD_LOCALS",
    ),
    "module- or class-level code",
)
unsupported(("DELETE_GLOBAL",), "deleting a global variable")
unsupported(("DELETE_DEREF",), "deleting a closure variable")
unsupported(
    (
        "GET_AWAITABLE",
        "GET_AITER",
        "GET_ANEXT",
        "BEFORE_ASYNC_WITH",
        "ASYNC_GEN_WRAP",
        "SEND",
        "END_SEND",
        "GET_YIELD_FROM_ITER",
    ),
    "async code or `yield from`",
)
unsupported(
    (
        "MATCH_CLASS",
        "MATCH_MAPPING",
        "MATCH_SEQUENCE",
        "MATCH_KEYS",
        "GET_LEN",
        "COPY_DICT_WITHOUT_KEYS",
    ),
    "the match statement",
)
unsupported(("PRINT_EXPR",), "interactive expression printing")
unsupported(("CALL_INTRINSIC_2",), "generic type parameters", versions=PY312)
unsupported(("INTERPRETER_EXIT",), "the interpreter's exit instruction")

# Never present in a code object: pseudo-instructions and the adaptive/instrumented variants.
_PSEUDO = (
    "JUMP",
    "JUMP_NO_INTERRUPT",
    "POP_BLOCK",
    "SETUP_FINALLY",
    "SETUP_CLEANUP",
    "SETUP_WITH",
    "LOAD_ZERO_SUPER_ATTR",
    "LOAD_ZERO_SUPER_METHOD",
    "LOAD_SUPER_METHOD",
    "STORE_FAST_MAYBE_NULL",
    "RESERVED",
    "ENTER_EXECUTOR",
    "HAVE_ARGUMENT",
)
unsupported(_PSEUDO, "a pseudo-instruction that never appears in code objects")
unsupported(("LOAD_METHOD", "LOAD_CLOSURE"), "a 3.11-only instruction", versions=PY312)


def _instrumented() -> tuple[str, ...]:
    import dis

    return tuple(name for name in dis.opmap if name.startswith("INSTRUMENTED_"))


unsupported(_instrumented(), "an instrumented instruction (set by sys.monitoring)", versions=PY312)

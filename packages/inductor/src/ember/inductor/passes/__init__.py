"""Graph → Graph passes that run before lowering: dead code and common subexpressions.

Each pass returns a new Graph and leaves its input untouched; `effects` says which nodes a
pass may remove or merge.
"""

"""Shared by the Python interop tests (test_*.py, run by `make interop`):
where the tree, the scratch directory and the fixtures are (from the
environment the Makefile sets), and a check counter: each failed check is
printed when it happens, and report() sums them up and gives the exit
status (1 if any failed).
"""

import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))
TMP = os.environ.get("KVS_TMP", "/tmp")
FIXTURES = os.environ.get("KVS_FIXTURES", os.path.join(ROOT, "..", "shared",
                                                       "fixtures"))

checks = 0
failures = []


def check(cond, what):
    global checks
    checks += 1
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def report(name):
    """Prints the summary line of test `name`; returns its exit status."""
    print("%s: %d checks, %d failed" % (name, checks, len(failures)))
    return 1 if failures else 0

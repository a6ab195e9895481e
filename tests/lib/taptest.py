"""taptest — the case/check/TAP runner the Python test scripts share.

    from taptest import case, check, run
    @case("what it checks")
    def _(): check(cond, "what went wrong")
    run(cleanup)   # prints TAP, exits 1 if any case failed

A case may return a string: it is printed as a TAP directive (e.g. "SKIP promtool missing")."""
import sys

_cases = []


def case(name):
    def wrap(fn):
        _cases.append((name, fn))
        return fn
    return wrap


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def run(cleanup=None):
    print(f"1..{len(_cases)}")
    failed = 0
    for i, (name, fn) in enumerate(_cases, 1):
        try:
            note = fn()
            print(f"ok {i} - {name}" + (f" # {note}" if note else ""))
        except Exception as e:  # noqa: BLE001 - every failure is a TAP line
            failed += 1
            print(f"not ok {i} - {name}")
            for line in str(e).splitlines():
                print("# " + line)
    if cleanup:
        cleanup()
    sys.exit(1 if failed else 0)

"""tap.py — TAP output for the Python test scripts (the C tests use tap.h).

    from tap import Tap
    t = Tap()
    t.ok(cond, "what", detail)   # detail printed as '#' lines when cond is false
    sys.exit(t.done())           # plan line; 0, or 1 when anything failed
"""


class Tap:
    def __init__(self):
        self.n = 0
        self.failed = 0

    def ok(self, cond, what, detail=""):
        self.n += 1
        print(("ok %d - %s" if cond else "not ok %d - %s") % (self.n, what))
        if not cond:
            self.failed += 1
            for line in str(detail).splitlines()[-40:]:
                print("#   " + line)
        return cond

    def skip(self, what, why):
        self.n += 1
        print("ok %d - %s # SKIP %s" % (self.n, what, why))

    def done(self):
        print("1..%d" % self.n)
        return 1 if self.failed else 0

# What the warm pool runs in a new shared Python child, several times, each
# run a job of no owner in a realm of its own, before a token's first job
# takes the child (worker/src/sandbox/pool.rs). A new child runs its first
# jobs two to three times slower while V8 compiles CPython's hot functions
# with TurboFan; this makes them hot on the pool's time, not a job's. So it
# does in small what evaluation programs do: functions and classes, loops
# over ints and floats, strings, lists, dicts, sets, sorting, exceptions,
# and the standard modules they import most. It prints one line, which the
# worker checks.
import bisect
import collections
import functools
import heapq
import itertools
import math
import re
import string


def primes(n):
    sieve = [True] * (n + 1)
    for i in range(2, math.isqrt(n) + 1):
        if sieve[i]:
            for j in range(i * i, n + 1, i):
                sieve[j] = False
    return [i for i in range(2, n + 1) if sieve[i]]


class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y

    def __repr__(self):
        return f"Point({self.x}, {self.y})"

    def __lt__(self, other):
        return (self.x, self.y) < (other.x, other.y)


@functools.lru_cache(maxsize=None)
def fib(n):
    return n if n < 2 else fib(n - 1) + fib(n - 2)


ps = primes(2000)
points = sorted(Point(i % 17, (i * 7) % 13) for i in range(200))
text = " ".join(string.ascii_letters[i % 52] * (i % 5 + 1) for i in range(300))
common = collections.Counter(w.lower() for w in re.findall(r"[A-Za-z]+", text)).most_common(5)
squares = {str(i): i * i for i in range(500)}
residues = {i % 37 for i in range(1000)}
heap = list(range(300, 0, -1))
heapq.heapify(heap)
smallest = [heapq.heappop(heap) for _ in range(10)]
triples = list(itertools.combinations(range(12), 3))
dot = sum(x * y for x, y in zip(range(1000), range(1000, 0, -1)))
wave = sum(math.sin(i / 10) * 1.5 for i in range(500))
try:
    int("x")
except ValueError as e:
    message = str(e)
assert bisect.bisect_left(ps, 1000) == 168 and ",".join(map(str, ps[:5])) == "2,3,5,7,11"
assert repr(points[0]) == "Point(0, 0)" and common[0][1] > 0 and squares["12"] == 144
assert residues == set(range(37)) and smallest[0] == 1 and len(triples) == 220
assert dot > 0 and abs(wave) < 1000 and fib(80) == 23416728348467685 and message
print("warm")

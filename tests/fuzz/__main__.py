"""``python -m tests.fuzz [--every K [--offset R]] [--combinations N]``: run the fuzz
suite, print the outcome counts per input group (with the oracle's valid / invalid /
cannot-tell counts) and per oracle verdict, and the first defects; exit 1 if there is any
defect.  Defects include ``accepted_invalid`` (an invalid input answered) and
``refused_valid`` (a valid input refused).
"""

import argparse
import resource
import sys
import time

from hypothesis import HealthCheck, given, settings

from .cases import all_cases, flag_combinations
from .harness import BAD, Runner


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--every", type=int, default=1, help="run every K-th case (1: all)")
    parser.add_argument("--start", type=int, default=0, help="skip the cases before this one")
    parser.add_argument(
        "--offset", type=int, default=0, help="with --every K: the cases i with i %% K == offset"
    )
    parser.add_argument("--group", default="", help="only the groups starting with this")
    parser.add_argument("--combinations", type=int, default=1000, help="hypothesis examples")
    args = parser.parse_args()
    runner = Runner()
    start = time.perf_counter()
    for i, case in enumerate(all_cases()):
        picked = i % args.every == args.offset % args.every
        if i >= args.start and picked and case.group.startswith(args.group):
            runner.run(case)
        if i % 2000 == 0:
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6
            bad = sum(runner.tally.total()[k] for k in BAD)
            print(f"case {i}: {time.perf_counter() - start:.0f} s, {rss:.1f} GB, {bad} defects")
            sys.stdout.flush()

    if args.combinations:

        @settings(
            max_examples=args.combinations,
            deadline=None,
            database=None,
            # iterating HealthCheck skips its deprecated members (HealthCheckMeta.__iter__), which
            # pyright types as HealthCheckMeta
            suppress_health_check=list(HealthCheck),  # pyright: ignore[reportArgumentType]
        )
        @given(flag_combinations())
        def combinations(case):
            runner.run(case)

        combinations()
    print(" ".join(["python -m tests.fuzz", *sys.argv[1:]]))
    print(runner.tally.table())
    print(f"\n{time.perf_counter() - start:.0f} s")
    for outcome, case, detail in runner.tally.examples:
        print(f"\n{outcome} (valid={case.valid}): {case.label}\n  {detail}")
    return 1 if any(runner.tally.total()[k] for k in BAD) else 0


if __name__ == "__main__":
    sys.exit(main())

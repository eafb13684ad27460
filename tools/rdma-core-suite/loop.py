#!/usr/bin/python3
# loop.py: the named tests of rdma-core's own test suite (Debian
# python3-pyverbs, /usr/share/doc/rdma-core/tests), run as run_tests.py runs
# them, round after round, until a round does not pass:
#
#   loop.py --dev DEV --gid N TEST...      (TEST: tests.test_cqex.CqExTestCase.test_rc_traffic_cq_ex)
#
# Prints "round N passed" after each round that passes and "round N did not
# pass" (exit 1) after the first that does not; unittest's own report of
# each round goes to standard error. It never ends while every round
# passes: tools/tests/rdma_core_suite.rs kills the device under it and
# expects it to end, in error, soon after. Runs from a copy of the suite
# (Debian ships most modules compressed).
import gzip
import os
import shutil
import sys
import tempfile
import unittest
from importlib.machinery import SourceFileLoader

SRC = '/usr/share/doc/rdma-core/tests'


def suite_copy():
    work = tempfile.mkdtemp(prefix='rdma-core-loop-')
    dst = os.path.join(work, 'tests')
    shutil.copytree(SRC, dst)
    for name in os.listdir(dst):
        if name.endswith('.gz'):
            path = os.path.join(dst, name)
            with gzip.open(path, 'rb') as f, open(path[:-3], 'wb') as out:
                shutil.copyfileobj(f, out)
            os.remove(path)
    return work, dst


def main():
    work, tests_dir = suite_copy()
    try:
        os.chdir(tests_dir)
        sys.path.insert(0, tests_dir)
        from args_parser import parser
        tests = SourceFileLoader(
            'tests', os.path.join(tests_dir, '__init__.py')).load_module()
        # --dev and --gid for the suite's tests; the names stay in argv
        parser.parse_args()
        names = [a for a in sys.argv[1:] if not a.startswith('-')]
        if not names:
            sys.exit('loop.py: no test named')
        rounds = 0
        while True:
            suite = unittest.TestLoader().loadTestsFromNames(names, tests)
            result = unittest.TextTestRunner(verbosity=2).run(suite)
            rounds += 1
            if len(result.skipped) == result.testsRun:
                # skipped tests move no traffic: not a round that passed
                print(f'round {rounds} skipped every test', flush=True)
                return 2
            if not result.wasSuccessful():
                print(f'round {rounds} did not pass', flush=True)
                return 1
            print(f'round {rounds} passed', flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())

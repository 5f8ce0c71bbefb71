"""``benchmarks.profile_hit`` chooses its cores with the runner's ``choose_cpus``, whose
arguments have no ``--machine-cpus`` (scenario 6's): it must not need one."""

from __future__ import annotations

import argparse
import os

from benchmarks.run import choose_cpus


def test_choose_cpus_takes_profile_hits_arguments() -> None:
    before = os.sched_getaffinity(0)
    allowed = sorted(before)
    args = argparse.Namespace(load_cpu=str(allowed[0]), server_cpu=str(allowed[-1]))
    try:
        choose_cpus(args)  # profile_hit's arguments: no machine_cpus
    finally:
        os.sched_setaffinity(0, before)
    assert args.load_cpu == str(allowed[0])

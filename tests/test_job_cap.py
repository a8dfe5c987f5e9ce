"""The job cap: the policy's limit and margin, a shard's deadline, its chain, and the TU no chain builds."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from conftest import REPO
from cuw.base.errors import CuwError, InputError
from cuw.config.policy import JobPolicy, load_policy
from cuw.partition.job_cap import ShardLoad, chain, job_cap

CAP = job_cap(JobPolicy(limit_minutes=100, margin_minutes=20))  # 4,800 s of build


def _load(compile_s: float, longest_s: float, tus: int, beside_s: float = 0.0) -> ShardLoad:
    return ShardLoad(1, compile_s, longest_s, "csrc/a.cu", beside_s, tus)


def test_a_shard_within_its_budget_is_one_job_whose_deadline_keeps_room_for_its_longest_tu():
    """A chain of one part too: a compile started just before its deadline ends within the budget,
    not past the job's limit by the longest TU."""
    assert CAP.budget_s == 4800 and CAP.limit_s == 6000
    c = chain(_load(4000.0, 3000.0, 3, beside_s=800.0), CAP)
    assert (c.parts, c.deadline_s) == (1, 4800 - 3000)
    assert chain(_load(0.0, 0.0, 0), CAP).deadline_s == 4800  # an empty slice


def test_a_shard_past_its_budget_is_a_chain_whose_parts_each_compile_at_least_a_window():
    """Its deadline is the budget less its longest TU: a compile started before it ends within the
    budget. Each part compiles at least budget - beside - longest (the parts bound), and finishes one
    TU at least (the TU bound)."""
    c = chain(_load(9000.0, 1800.0, 12, beside_s=600.0), CAP)
    window = 4800 - 600 - 1800
    assert c.deadline_s == 4800 - 1800 and c.parts == math.ceil(9000 / window) == 4
    assert chain(_load(9000.0, 4000.0, 3), CAP).parts == 3  # window 800 s would be 12 parts; 3 TUs finish in 3


def test_a_tu_that_does_not_fit_a_part_is_built_by_no_chain():
    assert chain(_load(9000.0, 4800.0, 4), CAP).parts == 0
    assert chain(_load(9000.0, 4500.0, 4, beside_s=300.0), CAP).parts == 0  # with what the build costs beside it
    assert chain(_load(9000.0, 4499.0, 4, beside_s=300.0), CAP).parts == 4


def test_the_cap_option_replaces_the_limit_and_keeps_the_margin():
    policy = load_policy(REPO / "recipes").jobs
    assert (policy.limit_minutes, policy.margin_minutes) == (355, 20)
    assert job_cap(policy).budget_s == 335 * 60 and job_cap(policy, 80).budget_s == 60 * 60
    assert job_cap(policy, 21).budget_s == 60
    for bad in (20.0001, 20, 5, -1, float("nan"), float("inf")):  # 20.0001 left a shard 0 s to build
        with pytest.raises(InputError, match=r"--cap .*: a job's limit in minutes from 21 \(jobs.margin_minutes 20 "):
            job_cap(policy, bad)
    run = subprocess.run(
        [sys.executable, "-m", "cuw", "plan", "example", "--cap", "15"], capture_output=True, text=True, cwd=REPO
    )
    assert run.returncode == 2 and run.stderr.startswith("cuw: error: --cap 15: ") and len(run.stderr.splitlines()) == 1


@pytest.mark.parametrize(
    "jobs, message",
    [
        ("  limit_minutes: 0\n  margin_minutes: 0", r"jobs.limit_minutes = 0: minutes, 1..7200"),
        ("  limit_minutes: 30\n  margin_minutes: 30", r"jobs.margin_minutes = 30: .* under limit_minutes \(30\)"),
        ("  limit_minutes: 30\n  margin_minutes: -1", r"jobs.margin_minutes = -1"),
        ("  limit: 30", r"unknown key 'limit'; did you mean 'limit_minutes'\?"),
    ],
)
def test_a_job_policy_without_build_time_is_refused(recipes_dir, jobs, message):
    path = recipes_dir / "defaults.yml"
    text = path.read_text()
    start = text.index("\njobs:\n") + len("\njobs:\n")
    end = text.index("\n\n", start)
    path.write_text(text[:start] + jobs + text[end:])
    with pytest.raises(CuwError, match=message):
        load_policy(recipes_dir)

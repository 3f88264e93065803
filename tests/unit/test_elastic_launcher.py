"""kerashvdrun's elastic mode without starting ranks: the command line, host discovery, what
failures cost, and the driver's decisions, with a launch function that plays the ranks' part
(reports and hand-overs as ``handover.py`` records them). The worlds of real processes are in
tests/cluster/test_elastic.py.
"""

import os
import sys
import threading
import time

import pytest

from kerashvd.launcher import cli
from kerashvd.launcher.backends.srun import slurm_hosts
from kerashvd.launcher.discovery import DiscoveryError, FixedHosts, ScriptDiscovery
from kerashvd.launcher.elastic_driver import ElasticDriver, ElasticSettings
from kerashvd.launcher.handover import RESET_EXIT_CODE
from kerashvd.launcher.host_pool import HostPool, change_kind, layout
from kerashvd.launcher.hosts import Host
from kerashvd.launcher.job import JobOutcome
from kerashvd.launcher.reports import FailureReport
from kerashvd.launcher.watches import RankLost


def script(tmp_path, name, body):
    path = tmp_path / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)
    return str(path)


# -- command line ------------------------------------------------------------------------


def test_dry_run_starts_the_first_world_with_what_the_survivors_need(tmp_path, capsys):
    hosts = script(tmp_path, "hosts.sh", "echo localhost:3\n")
    assert cli.main(["--min-np", "2", "--max-np", "3", "--host-discovery-script", hosts,
                     "--dry-run", "python", "x.py"]) == 0
    command = capsys.readouterr().err
    # Forked on this machine, 3 ranks, hydra leaving the survivors of a failure alive.
    assert "-launcher fork -rmk user -disable-auto-cleanup -n 3 " in command, command
    assert "-genv KERASHVD_ELASTIC '127.0.0.1:" in command
    assert "-genv KERASHVD_RESTART_COUNT 0 " in command


def test_dry_run_in_a_slurm_allocation_places_ranks_on_its_nodes(tmp_path, monkeypatch,
                                                                   capsys):
    scontrol = script(tmp_path, "scontrol", 'test "$*" = "show hostnames n[1-2]" && '
                                            "printf 'n1\\nn2\\n'\n")
    script(tmp_path, "srun", "exit 0\n")
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    monkeypatch.setenv("SLURM_TASKS_PER_NODE", "2(x2)")
    monkeypatch.setenv("SLURM_NTASKS", "4")
    monkeypatch.delenv("SLURM_STEP_ID", raising=False)
    assert slurm_hosts(scontrol=scontrol) == [Host("n1", 2), Host("n2", 2)]
    assert cli.main(["--min-np", "2", "--dry-run", "python", "x.py"]) == 0
    command = capsys.readouterr().err
    assert "srun --mpi=pmi2 --kill-on-bad-exit=0 --no-kill --overlap --nodelist=n1,n1,n2,n2 " \
           "--distribution=arbitrary -n 4 " in command, command


@pytest.mark.parametrize("args, message", [
    (["--min-np", "3", "-np", "2"], "needs --min-np <= -np <= --max-np; received --min-np 3, "
                                    "-np 2, --max-np None"),
    (["-np", "4", "--max-np", "3"], "received --min-np 4, -np 4, --max-np 3"),
    (["--max-np", "2"], "-np is required: give the number of processes, e.g. -np 2 (or "
                        "--min-np in elastic mode)"),
    (["-np", "2", "--reset-limit", "3"], "--reset-limit only apply in elastic mode: add "
                                         "--min-np, --max-np or --host-discovery-script"),
    (["--min-np", "2", "--max-restarts", "1"], "--max-restarts does not combine with the "
                                               "elastic mode"),
    (["--min-np", "2", "--host-discovery-script", "/nonexistent"],
     "--host-discovery-script '/nonexistent' is not an executable file"),
    (["--min-np", "2", "-H", "a:2", "--host-discovery-script", sys.executable],
     "with --host-discovery-script or with -H/--hostfile, not both"),
    (["--min-np", "0"], "--min-np: expected an integer >= 1, received '0'"),
    (["--min-np", "1", "--elastic-timeout", "0"], "--elastic-timeout: expected a number of "
                                                  "seconds > 0, received '0'"),
])
def test_bad_elastic_arguments_give_clear_errors(args, message, capsys):
    with pytest.raises(SystemExit) as exit_info:
        cli.main(args + ["python", "x.py"])
    assert exit_info.value.code == 2
    assert message in capsys.readouterr().err


# -- discovery and what failures cost ------------------------------------------------------


def test_discovery_script_output_and_failures(tmp_path):
    found = ScriptDiscovery(script(tmp_path, "a.sh", "echo 'n1:2'; echo n2; echo 'n3 slots=3'\n"),
                            slots_per_host=4).find()
    assert found == [Host("n1", 2), Host("n2", 4), Host("n3", 3)]
    assert ScriptDiscovery(script(tmp_path, "b.sh", "true\n")).find() == []
    with pytest.raises(DiscoveryError, match=r"exited with code 3: no inventory"):
        ScriptDiscovery(script(tmp_path, "c.sh", "echo no inventory >&2; exit 3\n")).find()
    with pytest.raises(DiscoveryError, match=r"received 'n1 n2' at the output of "):
        ScriptDiscovery(script(tmp_path, "d.sh", "echo n1 n2\n")).find()
    with pytest.raises(DiscoveryError, match=r"did not finish within 0.5 s"):
        ScriptDiscovery(script(tmp_path, "e.sh", "sleep 5\n"), timeout=0.5).find()


def test_a_failure_costs_its_slot_and_a_dead_host_until_it_is_listed_again():
    pool = HostPool()
    pool.update([Host("a", 3), Host("b", 2)])
    world = layout(pool.plan())
    assert world == ["a", "a", "a", "b", "b"]
    pool.record_failures(world, {2, 3, 4})  # one rank of a, every rank of b
    assert pool.usable() == [Host("a", 2)] and pool.lost() == ["b"]
    assert pool.plan(max_np=1) == [Host("a", 1)]
    pool.update([Host("a", 3), Host("b", 2)])  # still listed: still left out
    assert pool.usable() == [Host("a", 2)]
    assert pool.update([Host("a", 3)]) == ([], ["b"])
    assert pool.update([Host("a", 3), Host("b", 2)]) == (["b"], [])
    assert pool.usable() == [Host("a", 2), Host("b", 2)]
    assert change_kind([Host("a", 2)], [Host("a", 2), Host("b", 2)]) == "added"
    assert change_kind([Host("a", 2), Host("b", 2)], [Host("a", 2)]) == "removed"
    assert change_kind([Host("a", 2)], [Host("b", 2)]) == "changed"
    assert change_kind([Host("a", 2)], [Host("a", 2)]) is None


# -- the driver, with ranks played by the launch function --------------------------------


class Hosts:
    """A discovery whose list the test changes."""

    def __init__(self, *hosts):
        self.hosts = list(hosts)

    def find(self):
        return list(self.hosts)

    def describe(self):
        return "the test's hosts"


def end(world, failed=(), survivors=(), done=(), commit=5, code=-9):
    """The outcome of ``world``: ``failed`` ranks report ``code``, ``survivors`` hand over
    ``commit``, ``done`` ranks finished."""
    channel = world.channel
    for rank in survivors:
        channel.survivors[rank] = commit
    channel.done.update(done)
    failure = None
    for rank in list(failed) + list(survivors):
        report = FailureReport(rank, code if rank in failed else RESET_EXIT_CODE)
        if world.is_failure(report) and failure is None:
            failure = report
    return JobOutcome(returncode=0 if not failed and not survivors else 1, failure=failure)


def drive(settings, *outcomes, reachable=None):
    """Runs the driver; the k-th world ends as ``outcomes[k](world)``. Returns (exit code,
    the worlds' sizes, the log)."""
    sizes, lines = [], []

    def launch(world, signals):
        sizes.append(world.np)
        return outcomes[len(sizes) - 1](world)

    code = ElasticDriver(settings, launch, lines.append, reachable).run()
    return code, sizes, "\n".join(lines)


def test_a_killed_rank_leaves_a_smaller_world_that_finishes():
    settings = ElasticSettings(FixedHosts([Host("localhost", 3)]), np=3, min_np=2)
    code, sizes, log = drive(settings, lambda w: end(w, failed=[2], survivors=[0, 1]),
                             lambda w: JobOutcome(0))
    assert (code, sizes) == (0, [3, 2]), log
    assert "world 1 (3 ranks on localhost:3) ended: rank 2 was killed by signal 9 (SIGKILL) " \
           "(on localhost); ranks 0, 1 handed over (commit 5). Reset 1." in log
    assert "elastic: training finished in world 2, after 1 reset." in log


def test_fewer_slots_than_min_np_end_the_job_naming_hosts_and_failures():
    # Fixed hosts cannot change: no waiting.
    settings = ElasticSettings(FixedHosts([Host("a", 2), Host("b", 1)]), np=3, min_np=3)
    started = time.monotonic()
    code, sizes, log = drive(settings, lambda w: end(w, failed=[2], survivors=[0, 1]))
    assert time.monotonic() - started < 5
    assert (code, sizes) == (137, [3]), log
    assert "elastic: fewer than --min-np 3 slots and -H lists the same hosts for ever (usable " \
           "now: a:2; left out after failures: b; from -H); giving up.\n  world 1 (3 ranks " \
           "on a:2,b:1) ended: rank 2 was killed by signal 9 (SIGKILL) (on b)" in log, log
    # Discovery could bring hosts: it waits for --elastic-timeout.
    settings = ElasticSettings(Hosts(Host("a", 2), Host("b", 1)), np=3, min_np=3,
                               timeout=0.3, interval=0.05)
    code, sizes, log = drive(settings, lambda w: end(w, failed=[2], survivors=[0, 1], code=4))
    assert (code, sizes) == (4, [3]), log
    assert "elastic: waiting up to 0.3 s for 3 slots (--min-np); usable now: a:2; left out " \
           "after failures: b." in log
    assert "elastic: fewer than --min-np 3 slots for --elastic-timeout 0.3 s (usable now: " \
           "a:2; left out after failures: b; from the test's hosts); giving up." in log, log


def test_the_reset_limit_ends_the_job():
    settings = ElasticSettings(FixedHosts([Host("a", 4)]), np=4, min_np=1, reset_limit=1)
    code, sizes, log = drive(settings, lambda w: end(w, failed=[3], survivors=[0, 1, 2]),
                             lambda w: end(w, failed=[2], survivors=[0, 1], code=5))
    assert (code, sizes) == (5, [4, 3]), log
    assert "The job was reset 1 time(s), the --reset-limit; giving up." in log


def test_a_failure_after_training_finished_ends_the_job_with_it():
    settings = ElasticSettings(FixedHosts([Host("a", 2)]), np=2, min_np=1)
    code, sizes, log = drive(settings, lambda w: end(w, failed=[1], done=[0], code=3))
    assert (code, sizes) == (3, [2]), log
    assert "training had finished on rank 0: not starting another world." in log


def test_a_host_that_comes_is_announced_and_the_next_world_grows():
    hosts = Hosts(Host("a", 1))
    settings = ElasticSettings(hosts, np=1, min_np=1, max_np=3, interval=0.05)
    announced = []

    def first(world):
        hosts.hosts.append(Host("b", 1))
        deadline = time.monotonic() + 10
        while world.channel.hosts_update is None and time.monotonic() < deadline:
            time.sleep(0.02)
        announced.append(world.channel.hosts_update)
        return end(world, survivors=[0])

    code, sizes, log = drive(settings, first, lambda w: JobOutcome(0))
    assert (code, sizes, announced) == (0, [1, 2], ["added"]), log
    assert "elastic: hosts +b (the test's hosts lists a:1,b:1)." in log
    assert "elastic: world 1 ends at its next commit; the next runs 2 ranks on a:1,b:1." in log


def test_slots_are_waited_for_at_the_start():
    hosts = Hosts()
    settings = ElasticSettings(hosts, np=2, min_np=1, interval=0.05, timeout=30)
    threading.Timer(0.3, lambda: hosts.hosts.append(Host("a", 2))).start()
    code, sizes, log = drive(settings, lambda w: JobOutcome(0))
    assert (code, sizes) == (0, [2]), log
    assert "elastic: waiting up to 30 s for 2 slots (-np); usable now: no host." in log


def test_every_rank_failing_by_itself_ends_the_job_at_once():
    """The script's own error on every rank (each exits 1 and says why), no host lost: the
    job ends with that error instead of waiting --elastic-timeout for hosts."""
    settings = ElasticSettings(Hosts(Host("a", 2)), np=2, min_np=1, timeout=30, interval=0.05)

    def raising(world):
        for rank in range(world.np):
            world.channel.errors[rank] = "ValueError: bad input at step 3"
        return end(world, failed=[0, 1], code=1)

    started = time.monotonic()
    code, sizes, log = drive(settings, raising)
    assert time.monotonic() - started < 5, log
    assert (code, sizes) == (1, [2]), log
    assert "elastic: world 1 (2 ranks on a:2) ended: rank 0 exited with code 1 (on a); rank 1 " \
           "exited with code 1 (on a).\nEvery rank failed by itself (ranks 0, 1: ValueError: " \
           "bad input at step 3): an error of the training script, which another world would " \
           "meet again; not starting one." in log, log
    # Ranks killed by a signal are no failure of the script's own: their host is left out
    # and the job waits for hosts as before.
    settings.timeout = 0.3
    code, sizes, log = drive(settings, lambda w: end(w, failed=[0, 1], code=-9))
    assert (code, sizes) == (137, [2]), log
    assert "by itself" not in log and "waiting up to 0.3 s for 1 slot (--min-np)" in log, log


def test_a_host_that_stopped_answering_is_used_again_once_it_answers():
    """Host b stops answering (its ranks' connections time out) while discovery keeps listing
    it: the next world leaves it out; once the backend says it answers again, the world grows
    back at its next commit."""
    hosts = Hosts(Host("a", 1), Host("b", 1))
    settings = ElasticSettings(hosts, np=2, min_np=1, interval=0.05, probe_interval=0.05)
    answers = threading.Event()
    asked = []

    def reachable(names):
        asked.append(list(names))
        return list(names) if answers.is_set() else []

    def cut(world):
        world.is_failure(RankLost(1, "b", unreachable=True, timeout=3.0, host_ranks=(1,)))
        return end(world, survivors=[0])

    def alone(world):
        time.sleep(0.3)  # asked while b does not answer
        answers.set()
        deadline = time.monotonic() + 10
        while world.channel.hosts_update is None and time.monotonic() < deadline:
            time.sleep(0.02)
        return end(world, survivors=[0])

    code, sizes, log = drive(settings, cut, alone, lambda w: JobOutcome(0), reachable=reachable)
    assert (code, sizes) == (0, [2, 1, 2]), log
    assert "rank 1 stopped answering (nothing came back for 3 s); rank 0 handed over" in log, log
    assert "elastic: b answers again: ranks may run there again." in log, log
    assert "elastic: world 2 ends at its next commit; the next runs 2 ranks on a:1,b:1." in log
    assert ["b"] in asked

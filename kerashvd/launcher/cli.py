"""``kerashvdrun``: starts a command on N processes through MPICH hydra's ``mpiexec`` (on this
machine, or over ssh), or through ``srun --mpi=pmi2`` inside a SLURM allocation. This module
parses the command line; ``backends/`` holds the ways of starting ranks, and ``runner.py`` runs
the jobs.

Example::

    kerashvdrun -np 4 python train.py --epochs 3
    kerashvdrun -np 8 -H node1:4,node2:4 --fusion-threshold-mb 32 -x NCCL_DEBUG=INFO python train.py
    kerashvdrun -np 8 --hostfile hosts.txt --ssh-port 2222 python train.py    # over ssh
    kerashvdrun python train.py      # in an sbatch script: one rank per SLURM task
"""

import argparse
import os
import re
import shlex
import sys

from .arg_types import non_negative_int, port, positive_int, positive_seconds, seconds
from .backends import Request, select
from .elastic_driver import ElasticDriver
from .elastic_options import add_elastic_flags, elastic_dry_run, elastic_settings, is_elastic
from .engine_flags import add_engine_flags, engine_environment
from .errors import LaunchError
from .hosts import check_slots, parse_hostfile, parse_hosts
from .restarts import DEFAULT_DELAY, VARIABLE as RESTART_VARIABLE
from .runner import Runner
from .ssh import DEFAULT_CONNECT_TIMEOUT, SshSettings

_VARIABLE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")

_DESCRIPTION = """\
Run COMMAND on NP processes with kerashvd (through the mpiexec of the `mpich` package).

Each rank runs under a small supervisor: when any rank exits with a non-zero code or is killed,
kerashvdrun stops all the others and exits with that first failed rank's code (128 + N for a
rank killed by signal N). Ctrl-C or SIGTERM stops every rank (send it twice to force).
With --max-restarts N, a failed job is started again, every rank, up to N times, with
KERASHVD_RESTART_COUNT (0, 1, ...) in every rank's environment; the script resumes from its
own checkpoint. A job stopped with Ctrl-C or SIGTERM is never restarted.
With -H or --hostfile naming other hosts, ranks there are started over ssh (hydra's ssh
launcher), which must work without a password; each remote host is checked first (ssh login,
and this Python, kerashvd and the working directory at the same paths), and one that fails is
named with the fix before anything starts.
Inside a SLURM allocation (SLURM_JOB_ID set, no -H or --hostfile) the ranks are SLURM tasks
started with `srun --mpi=pmi2` (plus --overlap inside an srun step), so each gets its own
--cpus-per-task CPUs and GPUs; -np defaults to SLURM_NTASKS.
With --min-np, --max-np or --host-discovery-script (elastic mode, for scripts that train under
hvd.elastic.run), a job whose ranks or hosts are lost goes on with fewer ranks, and grows
when hosts come: each change of size starts a new world of processes that takes over the
last commit of the one before (see docs/elastic.md).
"""

_EPILOG = """\
examples:
  kerashvdrun -np 2 python train.py
  kerashvdrun -np 8 -H node1:4,node2:4 python train.py     (over ssh; same paths on every host)
  kerashvdrun -np 8 --hostfile hosts.txt --ssh-identity-file ~/.ssh/cluster_key python train.py
  kerashvdrun -np 4 --fusion-threshold-mb 32 --cycle-time-ms 2 -x OMP_NUM_THREADS=1 \
      python train.py
  kerashvdrun -np 4 --max-restarts 3 python train.py --checkpoint-dir ckpt   (resumes on a restart)
  kerashvdrun -np 8 --min-np 4 --max-np 16 --host-discovery-script ./hosts.sh python train.py
  kerashvdrun python train.py        (in an sbatch script: srun --mpi=pmi2 -n $SLURM_NTASKS)
"""


def build_parser():
    """Returns the ``argparse`` parser of ``kerashvdrun`` (its ``--help`` lists every flag)."""
    parser = argparse.ArgumentParser(
        prog="kerashvdrun", description=_DESCRIPTION, epilog=_EPILOG, allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "-np", "--num-proc", dest="np", type=positive_int, metavar="NP",
        help="number of processes (ranks) to start; under SLURM defaults to SLURM_NTASKS")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "-H", "--hosts", metavar="HOST:SLOTS[,HOST:SLOTS...]",
        help="hosts to run on and how many processes each may run (':SLOTS' defaults to 1), "
             "e.g. node1:4,node2:4, filled in order (ranks 0-3 on node1). Hosts other than "
             "this one are reached over ssh. Default: this machine, or the SLURM allocation "
             "(through srun)")
    where.add_argument(
        "-hostfile", "--hostfile", metavar="PATH",
        help="a file of hosts instead of -H: one per line, as 'node1 slots=4' (Horovod's and "
             "Open MPI's form), 'node1:4' or 'node1'; '#' starts a comment")
    parser.add_argument(
        "-x", dest="variables", action="append", default=[], metavar="NAME[=VALUE]",
        help="set environment variable NAME in every rank, to VALUE or to its value in "
             "kerashvdrun's environment (repeat for more). Ranks already get kerashvdrun's "
             "environment (hydra's default); -x sets or overrides a variable explicitly")
    parser.add_argument(
        "--prefix-output", action="store_true",
        help="start every output line of a rank with '[RANK] '")
    parser.add_argument(
        "--verbose", action="store_true",
        help="print the mpiexec (or srun) command, and the ssh command for other hosts, "
             "before running it")
    parser.add_argument(
        "--dry-run", action="store_true",
        help="print the mpiexec (or srun) command and exit without running it")
    parser.add_argument(
        "--mpi-args", metavar="'ARGS'", default="",
        help="extra options for hydra's mpiexec, as one quoted string placed before -n, e.g. "
             "--mpi-args='-bind-to core' (see mpiexec -help); inside a SLURM allocation, "
             "options for srun instead, e.g. --mpi-args='--cpus-per-task=4'")
    ssh = parser.add_argument_group(
        "ssh (for hosts in -H or --hostfile other than this one; ssh runs with "
        "BatchMode=yes: no password or host-key prompts)")
    ssh.add_argument("--ssh-port", type=port, metavar="PORT",
                     help="the hosts' ssh port (ssh -p). Default: ssh's (22, or the ssh config)")
    ssh.add_argument("--ssh-identity-file", metavar="FILE",
                     help="the private key to log in with (ssh -i)")
    ssh.add_argument("--ssh-config-file", metavar="FILE",
                     help="an ssh client configuration to use instead of ~/.ssh/config (ssh -F)")
    ssh.add_argument("--ssh-connect-timeout", type=positive_seconds, metavar="SECONDS",
                     default=DEFAULT_CONNECT_TIMEOUT,
                     help="seconds to wait for a host to accept the ssh connection before "
                          f"naming it unreachable (default {DEFAULT_CONNECT_TIMEOUT:g})")
    restarts = parser.add_argument_group(
        "restarts (torchrun's --max-restarts; the script resumes from its own checkpoint)")
    restarts.add_argument(
        "--max-restarts", type=non_negative_int, default=0, metavar="N",
        help="when the job fails (a rank exits non-zero or is killed), stop every rank and "
             "start them all again, up to N times; every rank gets "
             f"{RESTART_VARIABLE}=0 on the first attempt, 1 on the first restart, ... "
             "A job stopped with Ctrl-C or SIGTERM is not restarted. Default: 0 (never)")
    restarts.add_argument(
        "--restart-delay", type=seconds, default=DEFAULT_DELAY, metavar="SECONDS",
        help="seconds to wait after a failed attempt's ranks have all ended before starting "
             f"the next (default {DEFAULT_DELAY:g}: time for GPU memory, ports and files the "
             "dead ranks held to be released)")
    add_elastic_flags(parser)
    add_engine_flags(parser.add_argument_group(
        "settings (become KERASHVD_* variables in every rank, read by kerashvd.init() and "
        "the optimizers)"))
    parser.add_argument(
        "command", nargs=argparse.REMAINDER, metavar="COMMAND [ARGS ...]",
        help="the program every rank runs, e.g. python train.py")
    return parser


def _variables(parser, items):
    env = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not _VARIABLE.match(name):
            parser.error(f"-x expects NAME or NAME=VALUE with NAME made of letters, digits and "
                         f"'_' (not starting with a digit); received -x {item!r}.")
        if not sep:
            if name not in os.environ:
                parser.error(f"-x {name}: {name} is not set in kerashvdrun's environment; set "
                             f"it, or give its value with -x {name}=VALUE.")
            value = os.environ[name]
        env[name] = value
    return env


def _request(parser, args):
    """The :class:`~kerashvd.launcher.backends.Request` of the command line, its parts checked
    against each other; sets ``args.command`` and ``args.mpi_args``."""
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given: say what every rank runs, e.g. "
                     "kerashvdrun -np 2 python train.py")
    args.command = command
    hosts = None
    try:
        if args.hosts is not None:
            hosts = parse_hosts(args.hosts)
        elif args.hostfile is not None:
            hosts = parse_hostfile(args.hostfile)
    except ValueError as err:
        parser.error(str(err))
    ssh = SshSettings(args.ssh_port, args.ssh_identity_file, args.ssh_config_file,
                      args.ssh_connect_timeout)
    try:
        ssh.validate()
    except ValueError as err:
        parser.error(f"{err}.")
    try:
        args.mpi_args = shlex.split(args.mpi_args)
    except ValueError as err:  # e.g. "No closing quotation"
        parser.error(f"--mpi-args {args.mpi_args!r}: {err}")
    np = args.np if args.np is not None else args.min_np
    return Request(np=np, hosts=hosts, discovery_script=args.host_discovery_script, ssh=ssh,
                   dry_run=args.dry_run)


def _np(parser, args, request, backend):
    """The first job's rank count: -np (--min-np), else the backend's default; checked
    against the hosts' slots."""
    np = request.np if request.np is not None else backend.default_np()
    if np is None:
        parser.error("-np is required: give the number of processes, e.g. -np 2"
                     + (" (or --min-np in elastic mode)" if is_elastic(args) else ""))
    if request.hosts is not None:
        try:
            check_slots(request.hosts, np, flag="-H" if args.hosts is not None else "--hostfile")
        except ValueError as err:
            parser.error(str(err))
    return np


def _log(message):
    print(f"kerashvdrun: {message}", file=sys.stderr, flush=True)


def main(argv=None):
    """Runs ``kerashvdrun`` with ``argv`` (default: ``sys.argv[1:]``) and returns its exit code.

    The command line is parsed here; the launcher backend that starts the ranks (hydra on this
    machine, hydra over ssh, srun) is picked by :func:`kerashvd.launcher.backends.select`, and
    the jobs run through :class:`~kerashvd.launcher.runner.Runner`.

    Args:
        argv: command-line arguments, without the program name.

    Returns:
        0 when every rank succeeded (on some attempt, with ``--max-restarts``); the first
        failed rank's exit code (128 + N for a rank killed by signal N), of the last attempt
        with ``--max-restarts``; 128 + N when kerashvdrun itself got signal N; 2 for bad
        arguments, when mpiexec (srun inside a SLURM allocation) cannot be found, or when a
        host in ``-H``/``--hostfile`` cannot be reached or lacks what the ranks need.

    Example:

    >>> main(["-np", "2", "python", "-c", "print('hello')"])
    hello
    hello
    0
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    request = _request(parser, args)
    backend = select(request)
    np = _np(parser, args, request, backend)
    elastic = elastic_settings(parser, args, np, request.hosts, backend)
    env = engine_environment(args)
    env.update(_variables(parser, args.variables))
    try:
        backend.find_program()
    except LaunchError as err:
        print(f"kerashvdrun: error: {err}", file=sys.stderr)
        return 2
    runner = Runner(backend, args.command, env, mpi_args=args.mpi_args,
                    prefix_output=args.prefix_output, verbose=args.verbose,
                    dry_run=args.dry_run, log=_log)
    try:
        if elastic is None:
            return runner.run_fixed(np, request.hosts, args.max_restarts,
                                    args.restart_delay).exit_code
        if args.dry_run:
            return elastic_dry_run(elastic, runner.run_world)
        return ElasticDriver(elastic, runner.run_world, _log, backend.reachable).run()
    except LaunchError as err:
        print(f"kerashvdrun: error: {err}", file=sys.stderr, flush=True)
        return 2
    except OSError as err:
        print(f"kerashvdrun: error: could not start {backend.program}: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

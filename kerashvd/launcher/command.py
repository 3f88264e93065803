"""The supervised command every rank runs, whatever starts it.

Every rank runs ``python -I _supervisor.py [--report HOST:PORT --token T] -- command...``:
the supervisor starts the real command, and when it fails tells the launcher, which then
stops the whole job (hydra alone lets the other ranks run on after a rank exits non-zero).
The program that starts these commands on every rank (hydra's ``mpiexec``, ``srun``) is a
launcher backend's (``backends/``).
"""

import os
import sys

SUPERVISOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_supervisor.py")
WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_worker.py")


def supervised(rank_command, report_address=None, token=None, prefix_output=False,
               python=None):
    """Returns the argv that runs ``rank_command`` under the per-rank supervisor.

    Args:
        rank_command: argv the rank runs, e.g. ``["python", "train.py"]``.
        report_address: ``"host:port"`` of the launcher's
            :class:`~kerashvd.launcher.reports.ReportServer`, or ``None``.
        token: the report server's token (required with ``report_address``).
        prefix_output: prefix every output line of the rank with ``[rank] ``.
        python: interpreter that runs the supervisor (default: this one).

    Returns:
        A list of strings.

    Example:

    >>> supervised(["python", "x.py"], python="python3")[3:]
    ['--', 'python', 'x.py']
    """
    argv = [python or sys.executable, "-I", SUPERVISOR]
    if report_address:
        argv += ["--report", report_address, "--token", token]
    if prefix_output:
        argv.append("--prefix-output")
    return argv + ["--", *rank_command]

"""A real one-host SLURM cluster for the tests: the session fixture ``slurm_cluster``.

The fixture writes its own ``slurm.conf``, ``gres.conf`` and munge key into a fresh temporary
directory (nothing under /etc is read or changed), starts ``munged``, ``slurmctld`` and
``slurmd`` as children of the test process, waits until ``sinfo`` shows the node idle, and
yields a :class:`SlurmCluster`. At the end of the session it cancels every job, stops the
daemons, and checks through /proc that no process of the cluster (daemon, ``slurmstepd`` or
job) is left; a leftover is killed and reported as an error. MPICH's shared-memory segments
that the jobs' killed ranks left in /dev/shm are removed.

The node offers :data:`CPUS` CPUs whatever the machine has (``SlurmdParameters=
config_overrides``) and ``OverSubscribe=FORCE``, so a 2-core machine runs 2-3 tasks and several
jobs at once. It offers :data:`GPUS` fake GPUs (``--gres=gpu:N``, ``--gpus-per-task``) backed
by character devices made with ``mknod``: SLURM sets ``CUDA_VISIBLE_DEVICES`` for them, but
there is no GPU behind them. ``MpiDefault=none``, as on clusters that leave the PMI choice to
the user: ranks find each other only under ``srun --mpi=pmi2``. There is no slurmdbd, so no
``sacct``: :meth:`SlurmCluster.wait` polls ``scontrol show job``.

Needs root (slurmd starts jobs, ``mknod``) and Debian's ``slurmctld slurmd slurm-client munge``
packages; the fixture skips with the install command otherwise.

API (use only these)::

    def test_x(slurm_cluster, tmp_path):
        slurm_cluster.env                    # dict for subprocesses: SLURM_CONF, PATH (this
                                             # Python's bin first), no inherited SLURM_*/PMI_*
        slurm_cluster.run(["srun", "-n", "2", "hostname"])   # subprocess.run(..., env=env,
                                             # capture_output=True, text=True, timeout=120)
        job = slurm_cluster.sbatch(script, "arg", chdir=tmp_path, env={"X": "1"},
                                   options=["-n", "2"])      # -> job id (int)
        slurm_cluster.wait(job, timeout=300)  # -> "COMPLETED", "FAILED", "CANCELLED", ...
        slurm_cluster.log_path(job)           # the job's StdOut file
        slurm_cluster.log(job)                # its text ("" while it does not exist)
        slurm_cluster.job(job)                # scontrol's fields of the job, as a dict
        slurm_cluster.cpus, slurm_cluster.gpus, slurm_cluster.node
"""

import contextlib
import ctypes
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import psutil
import pytest

from kerashvd.launcher import shm_segments

CPUS = 4
GPUS = 2
INSTALL_HINT = "SLURM not installed: apt-get install slurmctld slurmd slurm-client munge"
# Commands the fixture needs; daemons live in sbin, which a non-login PATH may lack.
_DAEMONS = ("munged", "slurmctld", "slurmd")
_CLIENTS = ("sinfo", "srun", "sbatch", "scontrol", "scancel", "squeue")
_SBIN = ("/usr/sbin", "/usr/local/sbin", "/sbin")
# States in which a job has ended (COMPLETING is not one: its processes may still run).
FINAL_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "PREEMPTED", "BOOT_FAIL", "DEADLINE", "SPECIAL_EXIT", "REVOKED"}


def _find(name):
    path = shutil.which(name)
    if path is None:
        path = shutil.which(name, path=os.pathsep.join(_SBIN))
    return path


def _free_ports(count):
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _die_with_pytest():
    """preexec_fn: the daemon gets SIGTERM if the test process dies without stopping it."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def _field(text, key):
    match = re.search(rf"(?:^|\s){re.escape(key)}=(\S*)", text)
    return match.group(1) if match else None


class SlurmCluster:
    """A running one-host cluster; see the module docstring for its API."""

    def __init__(self, root):
        self.root = root
        self.node = socket.gethostname().split(".")[0]
        self.cpus = CPUS
        self.gpus = 0
        self.conf = os.path.join(root, "slurm.conf")
        self._commands = {name: _find(name) for name in _DAEMONS + _CLIENTS}
        self._daemons = []  # (name, Popen), in start order
        self._segments_before = shm_segments.segments()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "PMI_"))}
        bindir = os.path.dirname(sys.executable)
        env["PATH"] = os.pathsep.join([bindir, env.get("PATH", ""), *_SBIN])
        env["SLURM_CONF"] = self.conf
        self.env = env

    # -- clients ------------------------------------------------------------------------------

    def run(self, argv, env=None, timeout=120, **kwargs):
        """``subprocess.run(argv)`` against this cluster; ``env`` is added to :attr:`env`."""
        full_env = dict(self.env, **(env or {}))
        kwargs.setdefault("capture_output", True)
        kwargs.setdefault("text", True)
        if kwargs["text"]:  # MPI's own error lines may hold raw bytes (UCX prints addresses)
            kwargs.setdefault("errors", "replace")
        return subprocess.run(argv, env=full_env, timeout=timeout, **kwargs)

    def sbatch(self, script, *args, env=None, chdir=None, options=()):
        """Submits ``script args...`` with ``sbatch [options]``; returns the job id (int).

        ``env`` is added to the job's environment (sbatch exports the whole environment),
        ``chdir`` is the job's working directory (and where relative ``--output`` paths go).
        """
        argv = ["sbatch", "--parsable", *options]
        if chdir is not None:
            argv.append(f"--chdir={chdir}")
        argv += [os.fspath(script), *map(str, args)]
        proc = self.run(argv, env=env, timeout=60)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}):\n"
                               f"{proc.stdout}{proc.stderr}")
        return int(proc.stdout.strip().split(";")[0])

    def job(self, job_id):
        """Returns the fields of ``scontrol show job`` as a dict (empty once forgotten)."""
        proc = self.run(["scontrol", "show", "job", "-o", str(job_id)], timeout=30)
        if proc.returncode != 0:
            return {}
        fields = {}
        for key in ("JobState", "ExitCode", "StdOut", "StdErr", "WorkDir", "NumTasks",
                    "NumCPUs", "NodeList", "Reason", "TRES"):
            value = _field(proc.stdout, key)
            if value is not None:
                fields[key] = value
        return fields

    def wait(self, job_id, timeout=300):
        """Waits until the job has ended; returns its final state (e.g. ``"COMPLETED"``).

        Raises:
            TimeoutError: when it is still queued or running after ``timeout`` seconds (the
                message holds its state and log; the job is cancelled).
        """
        deadline = time.monotonic() + timeout
        state = None
        while time.monotonic() < deadline:
            state = self.job(job_id).get("JobState")
            if state is None:
                raise RuntimeError(f"job {job_id} is unknown to slurmctld")
            if state in FINAL_STATES:
                return state
            time.sleep(0.25)
        self.run(["scancel", str(job_id)])
        raise TimeoutError(f"job {job_id} still {state} after {timeout} s; cancelled. "
                           f"Log:\n{self.log(job_id)[-5000:]}")

    def log_path(self, job_id):
        """Returns the path of the job's standard output file."""
        path = self.job(job_id).get("StdOut")
        if not path:
            raise RuntimeError(f"job {job_id}: slurmctld has no StdOut for it")
        return path

    def log(self, job_id):
        """Returns the text of the job's standard output ("" while the file does not exist)."""
        try:
            with open(self.log_path(job_id), errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    # -- start and stop -----------------------------------------------------------------------

    def _write_config(self):
        ctld_port, slurmd_port = _free_ports(2)
        for sub in ("state", "spool", "munge"):
            os.makedirs(os.path.join(self.root, sub), mode=0o755, exist_ok=True)
        key = os.path.join(self.root, "munge", "munge.key")
        fd = os.open(key, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
        with os.fdopen(fd, "wb") as f:
            f.write(os.urandom(1024))
        self.munge_socket = os.path.join(self.root, "munge", "socket")
        gres = ""
        try:
            for i in range(GPUS):
                os.mknod(os.path.join(self.root, f"gpu{i}"), 0o600 | 0o020000, os.makedev(1, 3))
            self.gpus = GPUS
        except OSError:
            self.gpus = 0  # no CAP_MKNOD: a cluster without GPUs
        with open(os.path.join(self.root, "gres.conf"), "w") as f:
            if self.gpus:
                f.write(f"Name=gpu File={self.root}/gpu[0-{self.gpus - 1}]\n")
                gres = f" Gres=gpu:{self.gpus}"
        open(os.path.join(self.root, "plugstack.conf"), "w").close()
        r = self.root
        lines = [
            "ClusterName=kerashvdtest",
            f"SlurmctldHost={self.node}(127.0.0.1)",
            "SlurmUser=root", "SlurmdUser=root",
            f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
            "AuthType=auth/munge", "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={r}/state", f"SlurmdSpoolDir={r}/spool", f"TmpFS={r}",
            f"SlurmctldPidFile={r}/slurmctld.pid", f"SlurmdPidFile={r}/slurmd.pid",
            f"SlurmctldLogFile={r}/slurmctld.log", f"SlurmdLogFile={r}/slurmd.log",
            f"PlugStackConfig={r}/plugstack.conf",
            "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/none", "MailProg=/bin/true",
            "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
            "SchedulerType=sched/builtin", "SlurmdParameters=config_overrides",
            "MpiDefault=none", "ReturnToService=2", "KillWait=2", "MinJobAge=600",
            # Job ids from a fresh random start: MPICH names its shared-memory segment after
            # the job and step id, and a killed rank's segment outlives it; a new cluster
            # counting from 1 again would meet an earlier run's leftovers in MPI_Init.
            f"FirstJobId={random.randrange(1_000, 60_000_000)}",
            "GresTypes=gpu",
            f"NodeName={self.node} NodeAddr=127.0.0.1 CPUs={self.cpus} RealMemory=4000{gres} "
            "State=UNKNOWN",
            "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP "
            "OverSubscribe=FORCE",
        ]
        with open(self.conf, "w") as f:
            f.write("\n".join(lines) + "\n")

    def _start(self, name, argv, ready, what, timeout=30):
        log = open(os.path.join(self.root, f"{name}.out"), "wb")
        proc = subprocess.Popen(argv, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True,
                                preexec_fn=_die_with_pytest)
        log.close()
        self._daemons.append((name, proc))
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{name} did not start ({what}); exit {proc.poll()}.\n"
                                   + self._logs())
            time.sleep(0.1)

    def _node_state(self):
        proc = self.run(["sinfo", "-h", "-o", "%t"], timeout=20)
        return proc.stdout.strip() if proc.returncode == 0 else None

    def _start_controller(self):
        """Starts munged and slurmctld (the nodes' slurmd come after)."""
        c, r = self._commands, self.root
        self._start("munged", [c["munged"], "--foreground", "--force",
                               f"--socket={self.munge_socket}",
                               f"--key-file={r}/munge/munge.key", f"--log-file={r}/munge/log",
                               f"--pid-file={r}/munge/pid", f"--seed-file={r}/munge/seed"],
                    lambda: os.path.exists(self.munge_socket), "its socket appears")
        self._start("slurmctld", [c["slurmctld"], "-D", "-f", self.conf],
                    lambda: self._node_state() is not None, "sinfo answers")

    def start(self):
        self._write_config()
        self._start_controller()
        c = self._commands
        self._start("slurmd", [c["slurmd"], "-D", "-f", self.conf, "-N", self.node],
                    lambda: self._node_state() == "idle", "the node becomes idle")

    def _logs(self):
        parts = []
        for name in ("munged.out", "munge/log", "slurmctld.out", "slurmctld.log",
                     "slurmd.out", "slurmd.log"):
            with contextlib.suppress(OSError), open(os.path.join(self.root, name)) as f:
                parts.append(f"--- {name}:\n" + "".join(f.readlines()[-15:]))
        return "\n".join(parts)

    def _processes(self):
        """Pids of processes other than this one whose environment holds our SLURM_CONF."""
        pids = []
        for proc in psutil.process_iter():
            try:
                if proc.pid != os.getpid() and proc.environ().get("SLURM_CONF") == self.conf:
                    pids.append(proc.pid)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue  # gone, a zombie, or a kernel thread
        return pids

    def _cancel_all_jobs(self, within=20):
        """Cancels every job and waits (up to ``within`` s) until squeue lists none."""
        self.run(["scancel", "--full", "--user", str(os.getuid())], timeout=30)
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            proc = self.run(["squeue", "-h", "-o", "%i"], timeout=20)
            if proc.returncode != 0 or not proc.stdout.strip():
                break
            time.sleep(0.25)

    def stop(self):
        """Cancels every job, stops the daemons, and kills anything of the cluster left.

        Returns the leftover processes it had to kill as ``[(pid, cmdline)]``.
        """
        if self._daemons and self._daemons[-1][0] == "slurmd":
            self._cancel_all_jobs()
        for name, proc in reversed(self._daemons):
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
                try:
                    proc.wait(timeout=15)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
        self._daemons = []
        leftovers = []
        deadline = time.monotonic() + 10  # slurmstepd may take a moment after slurmd
        while self._processes() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self._processes():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                leftovers.append((pid, " ".join(proc.cmdline())))
                proc.kill()
        shm_segments.remove_dead(self._segments_before)  # what killed ranks left in /dev/shm
        return leftovers


def _missing():
    missing = [name for name in _DAEMONS + _CLIENTS if _find(name) is None]
    if missing:
        return f"{INSTALL_HINT} (missing: {', '.join(missing)})"
    if os.geteuid() != 0:
        return "the test SLURM cluster needs root (slurmd starts the jobs)"
    return None


@pytest.fixture(scope="session")
def slurm_cluster():
    """A running one-host SLURM cluster (see the module docstring); skips without SLURM."""
    reason = _missing()
    if reason:
        pytest.skip(reason)
    root = tempfile.mkdtemp(prefix="khvd-slurm-")  # short: unix socket paths live here
    os.chmod(root, 0o755)
    cluster = SlurmCluster(root)
    try:
        cluster.start()
    except BaseException:
        cluster.stop()
        raise
    try:
        yield cluster
    finally:
        leftovers = cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
    if leftovers:
        raise RuntimeError(f"processes of the test SLURM cluster were still running after it "
                           f"stopped (now killed): {leftovers}")

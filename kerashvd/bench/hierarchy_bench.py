"""``python -m kerashvd.bench --hierarchical off,on,auto``: the allreduce in each hierarchical
mode side by side with raw MPI, with the bytes each node sends across its network link.

Each round initializes kerashvd once per mode (``hvd.init(hierarchical_allreduce=m,
hierarchical_allgather=m)``) and times every case once, so the modes alternate through the run
and the machine's drift hits them alike; each figure is the median of its rounds (raw MPI's
over every mode's slot). For every size it also counts, in the first round, the bytes that each
node sends on its network interfaces during a few allreduces of the mode (``/proc/net/dev``, every interface but
``lo``, read by one rank a node around calls that all ranks start and end together), and
prints the most any node sent per allreduce in units of the allreduce's bytes (``across``):
MPI traffic that bypasses the kernel (RDMA on InfiniBand) does not show there.
"""

import socket
import statistics

from . import header

# Calls whose traffic is counted, per mode and size (in the first round: bytes do not drift).
_TRAFFIC_CALLS = 2


def _sent_bytes():
    """Bytes this host's (network namespace's) interfaces have sent, all but loopback."""
    total = 0
    with open("/proc/net/dev") as f:
        for line in f.readlines()[2:]:
            name, _, counters = line.partition(":")
            if name.strip() != "lo":
                total += int(counters.split()[8])  # transmit bytes
    return total


class _Nodes:
    """The ranks' nodes as MPI sees them (MPI_COMM_TYPE_SHARED), and the traffic count."""

    def __init__(self, comm):
        from mpi4py import MPI

        self.comm = comm
        local = comm.Split_type(MPI.COMM_TYPE_SHARED)
        self.counts = local.Get_rank() == 0  # one rank a node reads the node's counters
        leaders = comm.allgather(local.bcast(comm.Get_rank(), root=0))
        local.Free()
        order = sorted(set(leaders))
        self.node_of = [order.index(k) for k in leaders]
        self.num_nodes = len(order)

    def placement(self):
        """'in blocks' (rank order is node order) or 'not in node order (cyclic ...)'."""
        if self.node_of == sorted(self.node_of):
            return "ranks in blocks"
        return "ranks not in node order: " + " ".join(map(str, self.node_of)) + " (node of each)"

    def traffic(self, fn, nbytes):
        """Most bytes any node sent per call of fn() across its link, over `nbytes`."""
        self.comm.Barrier()
        before = _sent_bytes() if self.counts else 0
        for _ in range(_TRAFFIC_CALLS):
            fn()
        self.comm.Barrier()
        sent = (_sent_bytes() - before) if self.counts else 0
        return max(self.comm.allgather(sent)) / _TRAFFIC_CALLS / nbytes


def _mpi_lines(nodes):
    """'#' lines on MPI's own algorithms: kerashvd's flat path (MPI_Iallreduce) and raw MPI's
    blocking MPI_Allreduce, as MPI's control variables set them."""
    from kerashvd import _core

    def cvar(name):
        value = _core.mpi_control_variable(name)
        return f"{name}={value!r}" if value is not None else f"{name} (none)"

    flat = _core.flat_allreduce_algorithm()
    model = _core.allreduce_path(nodes.node_of, "auto", 1 << 30, 1 << 28)
    return [
        f"# kerashvd's flat path is MPI_Iallreduce: {cvar('MPIR_CVAR_IALLREDUCE_INTRA_ALGORITHM')}"
        f" ({flat['algorithm']}; MPICH's default: recursive doubling up to 2 KiB and for "
        "user-defined ops such as kerashvd's float Min/Max and float16/bfloat16 Sum, "
        "reduce-scatter + allgather above)",
        f"# raw MPI is mpi4py's Allreduce, a blocking MPI_Allreduce: "
        f"{cvar('MPIR_CVAR_ALLREDUCE_COMPOSITION')}, "
        f"{cvar('MPIR_CVAR_ALLREDUCE_INTRA_ALGORITHM')} (MPICH's default for a commutative op "
        "on ranks of several nodes: its node-aware composition, reduce within each node, "
        "allreduce among one rank a node, broadcast within the node)",
        f"# auto's link model: {model['describe']}",
    ]


def run_modes(args, modes, hvd, tf, np, comm):
    """Measures and prints, on rank 0, the table of each mode in `modes` next to raw MPI."""
    from mpi4py import MPI

    from kerashvd import _core

    from .allreduce_bench import _Cases, _header, _layout, _time_calls

    started = header.now()
    n, rank = comm.Get_size(), comm.Get_rank()
    sync = lambda v: comm.allreduce(v, op=MPI.MAX)  # noqa: E731
    factor = 2.0 * (n - 1) / n if n > 1 else 1.0
    nodes = _Nodes(comm)
    hvd.init(hierarchical_allreduce=modes[0], hierarchical_allgather=modes[0])
    cases = _Cases(hvd, tf, np, comm, args)
    hosts = comm.allgather(socket.gethostname())
    hvd.shutdown()
    many_fns, train_fns = cases.many(), cases.train_like()
    times = {}   # (mode, case, i) -> [seconds per call, one per round]
    wrong = {}   # (mode, case) -> #wrong elements, summed over rounds
    across = {}  # (mode or "mpi", size) -> [bytes a node sent per call / size]
    iters = {}   # case -> {index: calls}, the same in every round and mode

    def measure(mode, case, fns, check=None):
        got = _time_calls(fns, args.seconds, sync, 1, iters.setdefault(case, {}))
        for i, t in enumerate(got):
            times.setdefault((mode, case, i), []).append(t)
        if check is not None:
            wrong[(mode, case)] = wrong.get((mode, case), 0) + check()

    for round_ in range(args.repeats):
        for mode in modes:
            hvd.init(hierarchical_allreduce=mode, hierarchical_allgather=mode)
            for nbytes in cases.sizes:
                op, mpi, check = cases.step(nbytes)
                measure(mode, nbytes, [op, mpi], check)
                if round_ == 0:
                    across.setdefault((mode, nbytes), []).append(nodes.traffic(op, nbytes))
                    across.setdefault(("mpi", nbytes), []).append(nodes.traffic(mpi, nbytes))
            measure(mode, "4k", [lambda: cases.small(cases.x4k)])
            many, grouped, _ = many_fns
            measure(mode, "many", [lambda: many(cases.xs), lambda: grouped(cases.xs)],
                    lambda: cases.many_wrong(many))
            measure(mode, "vars", [train_fns[0]])
            hvd.shutdown()

    def med(mode, case, i=0):
        return statistics.median(times[(mode, case, i)])

    def mpi_med(case):
        return statistics.median([t for m in modes for t in times[(m, case, 1)]])

    if rank != 0:
        return
    print(f"# kerashvd allreduce benchmark: {n} ranks{_layout(hosts)}, {nodes.placement()}, "
          f"float32 Sum, TF op in tf.function vs raw MPI; hierarchical modes "
          f"{', '.join(modes)} (hvd.init(hierarchical_allreduce=..., hierarchical_allgather="
          f"...)), median of {args.repeats} rounds; across: most bytes a node sent over its "
          "link per allreduce / the allreduce's bytes")
    print("\n".join(_header(hosts, started)))
    print("\n".join(_mpi_lines(nodes)))
    best_of = [m for m in ("off", "on") if m in modes]
    head = f"# {'size(B)':>10}"
    for mode in modes:
        head += f" {mode + '(us)':>10} {'busbw':>7} {'across':>6} {'#wrong':>6}"
        if mode == "auto":
            head += f" {'path':>5}"
    head += f" {'mpi(us)':>10} {'mpi busbw':>9} {'across':>6}"
    head += "".join(f" {m + '/mpi':>8}" for m in modes)
    if "auto" in modes and len(best_of) == 2:
        head += f" {'best/auto':>9}"
    print(head, flush=True)
    for nbytes in cases.sizes:
        line = f"  {nbytes:>10}"
        for mode in modes:
            t = med(mode, nbytes)
            line += (f" {t * 1e6:>10.1f} {nbytes / t / 1e9 * factor:>7.3f} "
                     f"{statistics.median(across[(mode, nbytes)]):>6.2f} "
                     f"{wrong[(mode, nbytes)]:>6}")
            if mode == "auto":
                path = _core.allreduce_path(nodes.node_of, "auto", nbytes, nbytes // 4)
                line += f" {'node' if path['hierarchical'] else 'flat':>5}"
        t_mpi = mpi_med(nbytes)
        line += (f" {t_mpi * 1e6:>10.1f} {nbytes / t_mpi / 1e9 * factor:>9.3f} "
                 f"{statistics.median(across[('mpi', nbytes)]):>6.2f}")
        line += "".join(f" {t_mpi / med(mode, nbytes):>8.2f}" for mode in modes)
        if "auto" in modes and len(best_of) == 2:
            best = min(med(m, nbytes) for m in best_of)
            line += f" {best / med('auto', nbytes):>9.2f}"
        print(line, flush=True)
    for mode in modes:
        print(f"# {mode}: single 4 KiB allreduce in tf.function {med(mode, '4k') * 1e3:.3f} ms; "
              f"100 x 16 KiB in one step {med(mode, 'many', 0) * 1e3:.3f} ms as 100 allreduces "
              f"(#wrong {wrong[(mode, 'many')]}), {med(mode, 'many', 1) * 1e3:.3f} ms grouped, "
              f"{med(mode, 'vars') * 1e3:.3f} ms grouped from variables", flush=True)

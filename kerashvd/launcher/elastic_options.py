"""``kerashvdrun``'s elastic-mode flags: their definitions, their checks against the other
flags, and the dry run of the first world (the mode itself is ``elastic_driver.py``)."""

import os

from .arg_types import non_negative_int, positive_int, positive_seconds
from .discovery import DiscoveryError, FixedHosts, ScriptDiscovery
from .elastic_driver import DEFAULT_TIMEOUT, ElasticSettings, World
from .errors import LaunchError
from .handover import CommitStore, WorldChannel
from .host_pool import HostPool


def add_elastic_flags(parser):
    """Adds the elastic mode's flags to ``kerashvdrun``'s parser."""
    elastic = parser.add_argument_group(
        "elastic mode (Horovod's; the script trains under hvd.elastic.run): on by any of "
        "--min-np, --max-np, --host-discovery-script")
    elastic.add_argument(
        "--min-np", type=positive_int, metavar="N",
        help="the fewest ranks the job goes on with after ranks or hosts are lost; fewer "
             "end the job (after --elastic-timeout seconds with a discovery script, at once "
             "with fixed hosts). Default: -np")
    elastic.add_argument(
        "--max-np", type=positive_int, metavar="N",
        help="the most ranks the job grows to when hosts come. Default: every slot of the "
             "hosts found")
    elastic.add_argument(
        "--host-discovery-script", metavar="PATH",
        help="an executable printing the hosts that may run ranks now, one a line "
             "('node1:4', 'node1 slots=4' or 'node1'); run about once a second. Without it "
             "the hosts are -H/--hostfile, the SLURM allocation's nodes, or this machine")
    elastic.add_argument(
        "--slots-per-host", type=positive_int, metavar="N",
        help="slots of a host the discovery script prints without a count (default 1), and "
             "of each node of a SLURM allocation (default: its tasks)")
    elastic.add_argument(
        "--elastic-timeout", type=positive_seconds, metavar="SECONDS",
        help="how long to wait for enough slots (-np at the start, --min-np after a reset) "
             f"before giving up (default {DEFAULT_TIMEOUT:g})")
    elastic.add_argument(
        "--reset-limit", type=non_negative_int, metavar="N",
        help="the most resets (new worlds after the first) before the job gives up. "
             "Default: no limit")


def is_elastic(args):
    """Whether a flag of the elastic mode was given."""
    return args.min_np is not None or args.max_np is not None or \
        args.host_discovery_script is not None


def elastic_settings(parser, args, np, hosts, backend):
    """The :class:`ElasticSettings` of an elastic run, checked; None without elastic flags.

    Args:
        parser: the command line's parser (for its errors).
        args: the parsed command line.
        np: the first world's rank count.
        hosts: the hosts of ``-H``/``--hostfile``, or ``None``.
        backend: the launcher backend (:mod:`kerashvd.launcher.backends`): whether it can run
            worlds, and its hosts when the command line names none.
    """
    if not is_elastic(args):
        given = [flag for flag, value in (("--slots-per-host", args.slots_per_host),
                                          ("--elastic-timeout", args.elastic_timeout),
                                          ("--reset-limit", args.reset_limit)) if value is not None]
        if given:
            parser.error(f"{', '.join(given)} only apply in elastic mode: add --min-np, "
                         "--max-np or --host-discovery-script")
        return None
    if not backend.elastic:
        parser.error(f"the elastic mode is not available with {backend.name}: drop --min-np, "
                     "--max-np and --host-discovery-script")
    min_np = args.min_np if args.min_np is not None else np
    if args.max_restarts:
        parser.error("--max-restarts does not combine with the elastic mode, which restarts "
                     "by itself: use --reset-limit to cap its resets")
    if min_np > np or (args.max_np is not None and np > args.max_np):
        parser.error(f"the elastic mode needs --min-np <= -np <= --max-np; received "
                     f"--min-np {min_np}, -np {np}, --max-np {args.max_np}")
    script = args.host_discovery_script
    if script is not None:
        if hosts is not None:
            parser.error("give the hosts with --host-discovery-script or with -H/--hostfile, "
                         "not both")
        if not (os.path.isfile(script) and os.access(script, os.X_OK)):
            parser.error(f"--host-discovery-script {script!r} is not an executable file "
                         "(chmod +x it, or check the path)")
        discovery = ScriptDiscovery(script, args.slots_per_host or 1)
    elif hosts is not None:
        discovery = FixedHosts(hosts, "-H" if args.hosts is not None else "--hostfile")
    else:
        try:
            found, source = backend.default_hosts(np, args.max_np, args.slots_per_host)
        except DiscoveryError as err:
            parser.error(str(err))
        discovery = FixedHosts(found, source)
    return ElasticSettings(discovery, np, min_np, args.max_np,
                           args.elastic_timeout or DEFAULT_TIMEOUT, args.reset_limit)


def elastic_dry_run(settings, run_world):
    """Prints the command of the first elastic world, on the hosts found now, with
    ``run_world(world, signals)`` (``Runner.run_world`` of a dry run)."""
    pool = HostPool()
    try:
        pool.update(settings.discovery.find())
    except DiscoveryError as err:
        raise LaunchError(str(err)) from None
    plan = pool.plan(settings.max_np)
    if sum(h.slots for h in plan) < settings.np:
        raise LaunchError(f"{settings.discovery.describe()} gives {sum(h.slots for h in plan)} "
                          f"slot(s), fewer than the {settings.np} the first world needs")
    with CommitStore() as store:
        world = World(0, plan, WorldChannel(store), settings.handover_grace, None, None)
        return run_world(world, None).exit_code

"""The launcher's view of its connections to the ranks, without ranks: watches that end with
or without the supervisor's goodbye (kerashvd/launcher/watches.py), the grouping of a host's
losses, and the link timeout every connection gets (kerashvd/launcher/keepalive.py). Hosts
really lost (killed, cut off) are in tests/cluster/test_lost_hosts.py."""

import queue
import socket
import time

from kerashvd.launcher import keepalive
from kerashvd.launcher.reports import ReportServer
from kerashvd.launcher.watches import LOST_EXIT_CODE, LossGatherer, RankLost


def _watch(server, rank, host):
    host_name, port = server.address.rsplit(":", 1)
    conn = socket.create_connection((host_name, int(port)), timeout=5)
    conn.sendall(f"{server.token} {rank} watch {host}\n".encode())
    return conn


def _events(events, within):
    found, deadline = [], time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            found.append(events.get(timeout=0.05))
        except queue.Empty:
            pass
    return found


def test_a_watch_closed_without_goodbye_is_a_lost_rank():
    events = queue.Queue()
    with ReportServer(events, link_timeout=7.0) as server:
        ended, killed, running = (_watch(server, rank, "n1") for rank in range(3))
        time.sleep(0.3)  # the server has read every watch line
        ended.sendall(b"bye\n")
        ended.close()
        killed.close()
        assert _events(events, 1.0) == [RankLost(1, "n1", False, 7.0, (0, 1, 2))]
    running.close()
    assert _events(events, 0.5) == []  # the launcher closing its side is no loss


def test_every_accepted_connection_gets_the_link_timeout():
    with ReportServer(queue.Queue(), link_timeout=3.0) as server:
        conn = _watch(server, 0, "n1")
        time.sleep(0.3)
        ends = server.watched()
        assert len(ends) == 1
        assert ends[0].getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
        if hasattr(socket, "TCP_USER_TIMEOUT"):
            assert ends[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT) == 3000
        conn.close()


def test_the_losses_of_one_host_are_named_together():
    gather = LossGatherer()
    group = gather.add(RankLost(2, "n2", True, 3.0, (2, 3)), now=0.0)
    assert not gather.due(now=0.5)  # rank 3 of n2 may follow
    gather.add(RankLost(0, "n1", False, 3.0, (0, 1)), now=0.6)  # a consequence elsewhere
    gather.add(RankLost(3, "n2", True, 3.0, (2, 3)), now=0.7)
    assert gather.due(now=0.7) and group.ranks == [2, 3] and group.whole_host
    assert group.describe() == ("host n2 stopped answering (ranks 2, 3): nothing came back "
                                "for 3 s (a cut link, or the host is down)")
    assert group.exit_code == LOST_EXIT_CODE == 255
    alone = LossGatherer()
    one = alone.add(RankLost(1, "n1", False, 3.0, (0, 1)), now=0.0)
    assert not alone.due(now=0.5) and alone.due(now=1.1) and not one.whole_host
    assert one.describe() == "rank 1 on n1 ended without a word (its supervisor was killed)"


def test_a_whole_host_lost_names_the_failure_even_after_a_loss_elsewhere():
    """A killed node's ssh session ends hydra's mpiexec, which may kill a supervisor on the
    surviving node a moment before the killed node's own losses arrive: the whole host lost
    is the cause, the rank elsewhere a consequence."""
    gather = LossGatherer()
    first = gather.add(RankLost(0, "n1", False, 3.0, (0, 1)), now=0.0)
    assert first.host == "n1" and not gather.due(now=0.05)
    gather.add(RankLost(2, "n2", False, 3.0, (2, 3)), now=0.1)
    group = gather.add(RankLost(3, "n2", False, 3.0, (2, 3)), now=0.2)
    assert gather.due(now=0.2) and gather.group is group
    assert group.describe() == ("host n2 was lost: ranks 2, 3 ended without a word (their "
                                "processes were killed, or the host went down)")
    gather.announced = True
    assert gather.add(RankLost(1, "n1", False, 3.0, (0, 1)), now=0.3) is group


def test_the_link_timeout_follows_the_peer_timeout():
    assert keepalive.link_timeout({}) == 28.0
    assert keepalive.link_timeout({"KERASHVD_PEER_TIMEOUT": "5"}) == 3.0
    assert keepalive.link_timeout({"KERASHVD_PEER_TIMEOUT": "2"}) == 1.0
    assert keepalive.link_timeout({"KERASHVD_PEER_TIMEOUT": "soon"}) == 28.0

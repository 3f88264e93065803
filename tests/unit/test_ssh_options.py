"""kerashvdrun's and kerashvd.run's ssh settings and host checks that need no remote host:
the mpiexec and ssh command lines (--dry-run), and bad settings refused before anything
starts. Ranks really started over ssh: tests/cluster/test_ssh_launch.py."""

import re

import pytest


def _dry_run(capsys, *args):
    from kerashvd.launcher import cli

    assert cli.main([*args, "--dry-run", "python", "x.py"]) == 0
    return capsys.readouterr().err


def test_remote_hosts_use_hydras_ssh_launcher_with_the_ssh_settings(capsys, tmp_path):
    key = tmp_path / "key"
    key.write_text("not checked before ssh reads it\n")
    err = _dry_run(capsys, "-np", "3", "-H", "localhost:1,node2:2", "--ssh-port", "2222",
                   "--ssh-identity-file", str(key), "--ssh-connect-timeout", "2.5")
    ssh = re.search(r"kerashvdrun: other hosts are reached with: (.*) HOST \.\.\.", err)
    assert ssh, err
    assert ssh.group(1).split()[1:] == [
        "-o", "BatchMode=yes", "-o", "ConnectTimeout=3", "-o", "ServerAliveInterval=10",
        "-o", "ServerAliveCountMax=3", "-i", str(key), "-p", "2222"]
    assert re.search(r"mpiexec -launcher ssh -launcher-exec \S+/ssh -localhost \S+ "
                     r"-hosts localhost:1,node2:2 -n 3 ", err), err
    assert " --report " in err and " --report 127.0.0.1:" not in err  # reachable from node2


def test_local_hosts_need_no_ssh(capsys):
    err = _dry_run(capsys, "-np", "2", "-H", "localhost:2")
    assert "-launcher ssh" not in err and "other hosts are reached" not in err
    assert " --report 127.0.0.1:" in err


@pytest.mark.parametrize("args, message", [
    (["--ssh-port", "0"], "--ssh-port: expected an integer >= 1, received '0'"),
    (["--ssh-port", "70000"], "--ssh-port: expected a port from 1 to 65535, received '70000'"),
    (["--ssh-connect-timeout", "0"],
     "--ssh-connect-timeout: expected a number of seconds > 0, received '0'"),
    (["--ssh-identity-file", "/no/such/key"],
     "the ssh identity file '/no/such/key' does not exist or cannot be read."),
    (["--ssh-config-file", "/no/such/config"],
     "the ssh config file '/no/such/config' does not exist or cannot be read."),
])
def test_bad_ssh_settings_are_refused(args, message, capsys):
    from kerashvd.launcher import cli

    with pytest.raises(SystemExit) as info:
        cli.main(["-np", "2", "-H", "node1:1,node2:1", *args, "python", "x.py"])
    assert info.value.code == 2
    assert message in capsys.readouterr().err


def test_run_checks_its_hosts_before_starting(tmp_path):
    import kerashvd

    def fn():
        return 1

    with pytest.raises(ValueError, match="takes hosts or hostfile, not both"):
        kerashvd.run(fn, hosts="a:1", hostfile=str(tmp_path / "h"))
    with pytest.raises(TypeError, match="expects hosts as a string"):
        kerashvd.run(fn, hosts=["a", "b"])
    with pytest.raises(ValueError, match=r"kerashvd\.run: np 3 needs 3 slots, but hosts a:1,"
                                         r"b:1 provides only 2\. Add hosts or slots to hosts, "
                                         r"or lower np\."):
        kerashvd.run(fn, np=3, hosts="a,b")
    with pytest.raises(ValueError, match="received an empty entry in hosts 'a,'"):
        kerashvd.run(fn, hosts="a,")
    with pytest.raises(ValueError, match="the ssh port must be an integer from 1 to 65535"):
        kerashvd.run(fn, hosts="a", ssh_port=0)

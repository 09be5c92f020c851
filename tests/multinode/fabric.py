"""Nodes on one machine: each a network namespace and a UTS namespace of its own (its own hostname), with an
address from 198.18.0.0/15 (RFC 2544's range for network benchmarks) on a veth link to a bridge in a switch
namespace of the test's own. Nothing is routed anywhere else: a node reaches the other nodes and its own loopback,
nothing more.

Each namespace is held by a process (`unshare ... sleep`) that dies with the test (PR_SET_PDEATHSIG), and every
process the test starts in a node is killed at close(): a namespace goes with its last process, and its veth with
it, so nothing is left behind even when a test fails or is killed. Needs root (CAP_NET_ADMIN, CAP_SYS_ADMIN).

    with Fabric(["node0", "node1", "collector"], directory) as fabric:
        node0 = fabric.nodes[0]
        process = node0.popen(["hostname"], stdout=subprocess.PIPE)   # prints node0
        node0.address                                                  # "198.18.0.1"
"""

import ctypes
import os
import shutil
import signal
import subprocess
import time

SEARCH = "/usr/sbin:/usr/bin:/sbin:/bin"
IP, UNSHARE, NSENTER = (shutil.which(name, path=SEARCH) or name for name in ("ip", "unshare", "nsenter"))
SUBNET_PREFIX = "198.18.0."  # a node's address: SUBNET_PREFIX + (index + 1), /24
PR_SET_PDEATHSIG = 1


def die_with_parent():
    """In the child before exec: SIGKILL when the test process ends, however it ends."""
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    os.setpgrp()  # its own process group: close() kills what it started, and nothing of the test's


def run(*argv):
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)}: {result.stderr.strip()}")
    return result.stdout


class Node:
    """A namespace pair (network, UTS) held by a process; commands run inside with nsenter."""

    def __init__(self, name, index, directory, tag):
        self.name, self.index, self.tag = name, index, tag
        self.address = SUBNET_PREFIX + str(index + 1)
        self.directory = os.path.join(directory, name)  # the node's own disk: its FILE_DIR lives under it
        os.makedirs(self.directory, exist_ok=True)
        self.holder = subprocess.Popen(
            [UNSHARE, "--net", "--uts", "sh", "-c", f"hostname {name} && exec sleep 100000"],
            preexec_fn=die_with_parent, stdin=subprocess.DEVNULL)
        self.processes = []
        wait_until(lambda: self.hostname() == name, f"{name}'s namespace")

    def hostname(self):
        result = subprocess.run([NSENTER, "-t", str(self.holder.pid), "-u", "hostname"], capture_output=True,
                                text=True)
        return result.stdout.strip()

    def command(self, argv):
        return [NSENTER, "-t", str(self.holder.pid), "-n", "-u", "--", *argv]

    def run(self, argv, **kwargs):
        """Runs argv in the node to its end (subprocess.run's keywords)."""
        return subprocess.run(self.command(argv), **kwargs)

    def popen(self, argv, **kwargs):
        """Starts argv in the node (subprocess.Popen's keywords); killed at close() if it is still running."""
        process = subprocess.Popen(self.command(argv), preexec_fn=die_with_parent, **kwargs)
        self.processes.append(process)
        return process

    def kill_everything(self):
        """The node is gone: every process started in it, and the namespaces with them."""
        for p in [*self.processes, self.holder]:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in [*self.processes, self.holder]:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass

    def cut_link(self):
        """The node's link down: its processes run on and reach nobody."""
        self.run([IP, "link", "set", "eth0", "down"], check=True)


class Fabric:
    def __init__(self, names, directory):
        self.tag = f"{os.getpid() % 100000}"
        self.nodes = []
        self.switch = subprocess.Popen([UNSHARE, "--net", "sleep", "100000"], preexec_fn=die_with_parent,
                                       stdin=subprocess.DEVNULL)
        try:
            wait_until(lambda: os.readlink(f"/proc/{self.switch.pid}/ns/net") != os.readlink("/proc/self/ns/net"),
                       "the switch's namespace")
            self.in_switch(IP, "link", "add", "br0", "type", "bridge")
            self.in_switch(IP, "link", "set", "br0", "up")
            for index, name in enumerate(names):
                self.nodes.append(self.add_node(name, index, directory))
        except BaseException:
            self.close()
            raise

    def in_switch(self, *argv):
        return run(NSENTER, "-t", str(self.switch.pid), "-n", "--", *argv)

    def add_node(self, name, index, directory):
        node = Node(name, index, directory, self.tag)
        self.nodes.append(node)  # closed with the others should the link fail
        # veth names are at most 15 bytes and live in the host's namespace until moved: unique to this test
        inside, outside = f"ln{self.tag}n{index}", f"ls{self.tag}n{index}"
        run(IP, "link", "add", inside, "type", "veth", "peer", "name", outside)
        try:
            run(IP, "link", "set", inside, "netns", str(node.holder.pid))
            run(IP, "link", "set", outside, "netns", str(self.switch.pid))
        except BaseException:
            # Not moved yet, the pair would outlive the test in the host's namespace: one end deletes both.
            for end in (inside, outside):
                subprocess.run([IP, "link", "del", end], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            raise
        self.in_switch(IP, "link", "set", outside, "master", "br0")
        self.in_switch(IP, "link", "set", outside, "up")
        for argv in ([IP, "link", "set", inside, "name", "eth0"],
                     [IP, "addr", "add", f"{node.address}/24", "dev", "eth0"],
                     [IP, "link", "set", "eth0", "up"], [IP, "link", "set", "lo", "up"]):
            node.run(argv, check=True, capture_output=True)
        self.nodes.pop()
        return node

    def close(self):
        for node in self.nodes:
            node.kill_everything()
        try:
            os.killpg(self.switch.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.switch.wait(timeout=30)

    def __enter__(self):
        return self

    def __exit__(self, *_):
        self.close()


def wait_until(condition, what, seconds=10):
    deadline = time.monotonic() + seconds
    while True:
        try:
            if condition():
                return
        except OSError:
            pass
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not ready within {seconds} s")
        time.sleep(0.02)

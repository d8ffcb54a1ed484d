"""Lab 06, section 7: reading NCCL's mind — rings, trees and transports from an ``NCCL_DEBUG=INFO`` log."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

PREFIX = re.compile(r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] NCCL INFO (?P<msg>.*)$")
VERSION = re.compile(r"NCCL version (?P<version>\S+)")
NETWORK = re.compile(r"^Using network (?P<net>\S+)")
COMM = re.compile(r"comm 0x[0-9a-f]+ rank (?P<rank>\d+) n[Rr]anks (?P<nranks>\d+)(?: nNodes (?P<nnodes>\d+))?")
RING = re.compile(r"^Channel (?P<channel>\d+)/(?P<total>\d+) :\s+(?P<ranks>\d+(?:\s+\d+)*)\s*$")
TREES = re.compile(r"\[(?P<channel>\d+)\] (?P<down>-?\d+(?:/-?\d+)*)->(?P<me>\d+)->(?P<up>-?\d+)")
CONNECTION = re.compile(r"^Channel (?P<channel>\d+)(?:/\d+)? : (?P<src>\d+)\[[^\]]*\] -> (?P<dst>\d+)\[[^\]]*\]"
                        r"(?: \[(?P<direction>send|receive)\])? via (?P<via>\S+(?: \S+)*)$")
COLL_CHANNELS = re.compile(r"^(?P<coll>\d+) coll channels")
TRANSPORTS = {"P2P": "P2P (NVLink or PCIe, GPU to GPU)", "SHM": "SHM (through host memory)",
              "NET": "NET (network between nodes)", "NVLS": "NVLS (NVLink SHARP)"}


@dataclass
class NcclReport:
    """What an ``NCCL_DEBUG=INFO`` log says about the communicator(s) it set up."""

    version: str | None = None
    network: str | None = None
    nranks: int | None = None
    nnodes: int | None = None
    hosts: list[str] = field(default_factory=list)
    rings: dict[int, list[int]] = field(default_factory=dict)  # channel -> ranks in ring order
    trees: dict[int, dict[int, tuple[list[int], int]]] = field(default_factory=dict)  # rank -> channel -> (children, parent)
    connections: list[dict[str, Any]] = field(default_factory=list)
    coll_channels: int | None = None
    init_complete: int = 0

    @property
    def transports(self) -> Counter:
        """How many channel connections use each transport (P2P, SHM, NET, ...)."""
        return Counter(c["transport"] for c in self.connections)

    def summary(self) -> str:
        """A few lines: who talks, the rings and trees (channels with the same shape grouped), the links."""
        lines = [f"NCCL {self.version or '?'}, {self.nranks or '?'} ranks on {len(self.hosts) or '?'} host(s) "
                 f"({', '.join(self.hosts)}), network for inter-node traffic: {self.network or '?'}"]
        if self.rings:
            shapes = _grouped({c: " -> ".join(map(str, r)) for c, r in self.rings.items()})
            lines.append(f"{len(self.rings)} ring channel(s): "
                         + "; ".join(f"{_channels(cs)}: {shape}" for shape, cs in shapes.items()))
        for rank, channels in sorted(self.trees.items()):
            roles = _grouped({c: f"parent {parent if parent >= 0 else '- (root)'}, children "
                                 f"{', '.join(map(str, kids)) or '-'}" for c, (kids, parent) in channels.items()})
            lines.append(f"trees of rank {rank}: " + "; ".join(f"{_channels(cs)}: {role}" for role, cs in roles.items()))
        for transport, count in sorted(self.transports.items()):
            lines.append(f"{count} connection(s) via {TRANSPORTS.get(transport, transport)}: "
                         + ", ".join(sorted({c['via'] for c in self.connections if c['transport'] == transport})))
        if self.coll_channels is not None:
            lines.append(f"{self.coll_channels} collective channel(s) per rank; {self.init_complete} rank(s) said Init COMPLETE")
        return "\n".join(lines)

    def __repr__(self) -> str:
        return self.summary()


def _grouped(by_channel: dict[int, str]) -> dict[str, list[int]]:
    """{shape: [channels]} from {channel: shape}, in channel order."""
    groups: dict[str, list[int]] = {}
    for channel, shape in sorted(by_channel.items()):
        groups.setdefault(shape, []).append(channel)
    return groups


def _channels(channels: list[int]) -> str:
    """``channels 0-5, 12-17`` (runs of consecutive numbers joined)."""
    runs: list[list[int]] = []
    for c in channels:
        if runs and c == runs[-1][-1] + 1:
            runs[-1].append(c)
        else:
            runs.append([c])
    text = ", ".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in runs)
    return f"channel{'s' if len(channels) > 1 else ''} {text}"


def _tree(msg: str) -> dict[int, tuple[list[int], int]]:
    found = {}
    for match in TREES.finditer(msg):
        children = [int(v) for v in match["down"].split("/") if int(v) >= 0]
        found[int(match["channel"])] = (children, int(match["up"]))
    return found


def parse_nccl_log(text: str | Iterable[str]) -> NcclReport:
    """Read the ``NCCL INFO`` lines of one or several ranks' logs (other lines are ignored)."""
    lines = text.splitlines() if isinstance(text, str) else [line for chunk in text for line in chunk.splitlines()]
    report = NcclReport()
    ranks = _ranks_by_process(lines)
    for line in lines:
        version = VERSION.search(line)
        if version and report.version is None:
            report.version = version["version"]
        match = PREFIX.match(line.strip())
        if not match:
            continue
        msg, host = match["msg"].strip(), match["host"]
        if host not in report.hosts:
            report.hosts.append(host)
        if (found := NETWORK.match(msg)) is not None:
            report.network = found["net"]
        elif (found := COMM.search(msg)) is not None:
            report.nranks = int(found["nranks"])
            if found["nnodes"]:
                report.nnodes = int(found["nnodes"])
            if msg.endswith("Init COMPLETE"):
                report.init_complete += 1
        elif (found := RING.match(msg)) is not None:
            report.rings[int(found["channel"])] = [int(r) for r in found["ranks"].split()]
        elif msg.startswith("Trees "):
            rank = ranks.get((host, match["pid"]), int(match["dev"]))
            report.trees.setdefault(rank, {}).update(_tree(msg))
        elif (found := CONNECTION.match(msg)) is not None:
            via = found["via"]
            report.connections.append({"channel": int(found["channel"]), "src": int(found["src"]),
                                       "dst": int(found["dst"]), "direction": found["direction"] or "",
                                       "via": via, "transport": via.split("/")[0]})
        elif (found := COLL_CHANNELS.match(msg)) is not None:
            report.coll_channels = int(found["coll"])
    return report


def _ranks_by_process(lines: Sequence[str]) -> dict[tuple[str, str], int]:
    """(host, pid) -> rank, from the ``comm 0x... rank R`` lines (a Trees line names only its device)."""
    found = {}
    for line in lines:
        match = PREFIX.match(line.strip())
        if match and (comm := COMM.search(match["msg"])) is not None:
            found[(match["host"], match["pid"])] = int(comm["rank"])
    return found


# A log written by hand in the format NCCL 2.21 prints with NCCL_DEBUG=INFO, for 2 ranks on one node
# with two GPUs joined by NVLink (lines as they appear in public NCCL bug reports; host and ids made up).
EXAMPLE_NCCL_LOG = """\
gpu-node1:4101:4101 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.11<0>
gpu-node1:4101:4101 [0] NCCL INFO NET/Plugin : No plugin found (libnccl-net.so), using internal implementation
gpu-node1:4101:4101 [0] NCCL INFO cudaDriverVersion 12040
NCCL version 2.21.5+cuda12.4
gpu-node1:4102:4102 [1] NCCL INFO cudaDriverVersion 12040
gpu-node1:4101:4170 [0] NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [RO]; OOB ib0:10.0.0.11<0>
gpu-node1:4101:4170 [0] NCCL INFO Using network IB
gpu-node1:4102:4171 [1] NCCL INFO Using network IB
gpu-node1:4101:4170 [0] NCCL INFO comm 0x55d0c8e4f0a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3a9e1f5b2d4e60 - Init START
gpu-node1:4102:4171 [1] NCCL INFO comm 0x5612a7b3c5e0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7c3a9e1f5b2d4e60 - Init START
gpu-node1:4101:4170 [0] NCCL INFO Setting affinity for GPU 0 to ffff,ffffffff
gpu-node1:4101:4170 [0] NCCL INFO comm 0x55d0c8e4f0a0 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
gpu-node1:4102:4171 [1] NCCL INFO comm 0x5612a7b3c5e0 rank 1 nRanks 2 nNodes 1 localRanks 2 localRank 1 MNNVL 0
gpu-node1:4101:4170 [0] NCCL INFO Channel 00/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Channel 01/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Channel 02/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Channel 03/04 :    0   1
gpu-node1:4101:4170 [0] NCCL INFO Trees [0] 1/-1/-1->0->-1 [1] 1/-1/-1->0->-1 [2] 1/-1/-1->0->-1 [3] 1/-1/-1->0->-1
gpu-node1:4101:4170 [0] NCCL INFO P2P Chunksize set to 524288
gpu-node1:4102:4171 [1] NCCL INFO Trees [0] -1/-1/-1->1->0 [1] -1/-1/-1->1->0 [2] -1/-1/-1->1->0 [3] -1/-1/-1->1->0
gpu-node1:4102:4171 [1] NCCL INFO P2P Chunksize set to 524288
gpu-node1:4101:4170 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 01/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Channel 02/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 02/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Channel 03/0 : 0[0] -> 1[1] via P2P/CUMEM/read
gpu-node1:4102:4171 [1] NCCL INFO Channel 03/0 : 1[1] -> 0[0] via P2P/CUMEM/read
gpu-node1:4101:4170 [0] NCCL INFO Connected all rings
gpu-node1:4102:4171 [1] NCCL INFO Connected all rings
gpu-node1:4101:4170 [0] NCCL INFO Connected all trees
gpu-node1:4102:4171 [1] NCCL INFO Connected all trees
gpu-node1:4101:4170 [0] NCCL INFO threadThresholds 8/8/64 | 16/8/64 | 512 | 512
gpu-node1:4101:4170 [0] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer
gpu-node1:4102:4171 [1] NCCL INFO 4 coll channels, 4 collnet channels, 0 nvls channels, 4 p2p channels, 2 p2p channels per peer
gpu-node1:4101:4170 [0] NCCL INFO comm 0x55d0c8e4f0a0 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 18000 commId 0x7c3a9e1f5b2d4e60 - Init COMPLETE
gpu-node1:4102:4171 [1] NCCL INFO comm 0x5612a7b3c5e0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 2a000 commId 0x7c3a9e1f5b2d4e60 - Init COMPLETE
"""

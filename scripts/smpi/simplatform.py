"""SimGrid platforms for scripts/simulate.sh: nodes of G GPUs, one uplink per node.

A platform is a star of N nodes around one switch (SimGrid's Floyd routing).
Each node is ONE SimGrid host with G cores running G ranks (so SMPI's
SMP-aware collectives see the node structure), and two kinds of routes:

  rank -> rank of the same node   the node's "intra" link: SHARED by all flows
                                   inside the node, G x per-GPU bandwidth (a ring
                                   or an all-to-all inside the node gets the
                                   per-GPU bandwidth per rank), latency lat_intra
  rank -> rank of another node    up_i (UP) then up_j (DOWN): the nodes' uplinks,
                                   full duplex (SPLITDUPLEX), bw_node each way,
                                   latency lat_inter / 2 each

So the G ranks of a node share its one uplink, and intra-node traffic never
touches it. The switch itself is non-blocking.
"""

from __future__ import annotations

import dataclasses
from xml.sax.saxutils import quoteattr


@dataclasses.dataclass(frozen=True)
class Platform:
    name: str
    gpus: int            # ranks per node
    bw_gpu: float        # bytes/s per GPU inside a node
    lat_intra: float     # seconds, one message inside a node
    bw_node: float       # bytes/s of a node's uplink, each direction
    lat_inter: float     # seconds, one message between nodes (both uplinks)
    note: str = ""
    # The topology as a user would write it from the machine's spec sheet, with
    # mdring's default link traits ("{n}": the number of nodes): the natural input.
    natural: str = "nvlink:{g} x infiniband:{n}"

    def natural_topology(self, nodes: int) -> str:
        return self.natural.format(g=self.gpus, n=nodes) if nodes > 1 else self.natural.split(" x ")[0].format(
            g=self.gpus)

    def describe(self) -> str:
        return (f"{self.name}: {self.gpus} GPUs/node at {self.bw_gpu / 1e9:g} GB/s each "
                f"({self.lat_intra * 1e6:g} us), {self.bw_node / 1e9:g} GB/s uplink per node "
                f"({self.lat_inter * 1e6:g} us)")


def _bw(x: float) -> str:
    return f"{x:.9g}Bps"


def _lat(x: float) -> str:
    return f"{x:.9g}s"


def platform_xml(p: Platform, nodes: int) -> str:
    out = ["<?xml version='1.0'?>",
           '<!DOCTYPE platform SYSTEM "https://simgrid.org/simgrid.dtd">',
           f"<!-- {p.describe()}; {nodes} nodes, written by scripts/smpi/simplatform.py -->",
           '<platform version="4.1">',
           '<zone id="cluster" routing="Floyd">']
    for i in range(nodes):
        out.append(f'  <host id="node{i}" speed="1Gf" core="{p.gpus}"/>')
    out.append('  <router id="switch"/>')
    for i in range(nodes):
        out.append(f'  <link id="intra{i}" bandwidth={quoteattr(_bw(p.gpus * p.bw_gpu))} '
                   f'latency={quoteattr(_lat(p.lat_intra))} sharing_policy="SHARED"/>')
        out.append(f'  <link id="up{i}" bandwidth={quoteattr(_bw(p.bw_node))} '
                   f'latency={quoteattr(_lat(p.lat_inter / 2))} sharing_policy="SPLITDUPLEX"/>')
    for i in range(nodes):
        out.append(f'  <route src="node{i}" dst="node{i}" symmetrical="NO"><link_ctn id="intra{i}"/></route>')
        out.append(f'  <route src="node{i}" dst="switch" symmetrical="NO"><link_ctn id="up{i}" direction="UP"/></route>')
        out.append(f'  <route src="switch" dst="node{i}" symmetrical="NO"><link_ctn id="up{i}" direction="DOWN"/></route>')
    out += ["</zone>", "</platform>", ""]
    return "\n".join(out)


def hostfile(p: Platform, nodes: int) -> str:
    """Ranks g*G .. g*G+G-1 on node g: mdring's dimension 0 is the node."""
    return "".join(f"node{i}:{p.gpus}\n" for i in range(nodes))

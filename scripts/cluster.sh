#!/usr/bin/env bash
# A cluster of "nodes" on this machine, for tests and benchmarks across real TCP/IP
# stacks: each node a network namespace with its own stack and host name, its uplink
# a veth into a bridge that lives in a namespace of its own, shaped with tbf in both
# directions. Addresses exist only inside these namespaces; nothing is added to the
# machine's own network.
#
#   scripts/cluster.sh up N [--uplink RATE] [--name NAME]   N nodes (2 to 64), RATE as tc
#                                  takes it (1gbit, 400mbit; default: unshaped)
#   scripts/cluster.sh down [--name NAME]                   remove them (also: on failure of up)
#   scripts/cluster.sh hosts [SLOTS] [--name NAME]          "10.213.0.1:SLOTS,10.213.0.2:SLOTS,..."
#   scripts/cluster.sh agent HOST COMMAND...                run COMMAND on node HOST (its address)
#                                  as ssh does (words joined, run by sh): mdring-run --agent, or
#                                  Open MPI's plm_rsh_agent
#   scripts/cluster.sh uplink RATE|down|up HOST [--name NAME]  reshape, cut or restore a node's uplink
#   scripts/cluster.sh exec I COMMAND...                    run COMMAND on node I (0-based)
#
# Node i (0-based) is namespace NAME-nI (default name mdc), address 10.213.0.(i+1)/24 on
# its eth0, host name NAME-nI (a UTS namespace of its own per command, so that mdring,
# UCX and Open MPI each see N machines; every node's name resolves on the nodes through
# /etc/netns/NAME-nI/hosts, which down removes). Needs root (ip netns, tc, unshare).
set -euo pipefail

name=mdc
subnet=10.213.0
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --name) name=$2; shift 2 ;;
    --name=*) name=${1#--name=}; shift ;;
    --uplink) uplink=$2; shift 2 ;;
    --uplink=*) uplink=${1#--uplink=}; shift ;;
    *) args+=("$1"); shift ;;
  esac
  # agent/exec: everything after the host is the command, options included.
  if [ ${#args[@]} -ge 2 ] && { [ "${args[0]}" = agent ] || [ "${args[0]}" = exec ]; }; then
    args+=("$@")
    break
  fi
done
set -- "${args[@]}"
cmd=${1:-}
shift || true

die() { echo "cluster.sh: $*" >&2; exit 2; }
[[ "$name" =~ ^[a-z][a-z0-9]{0,7}$ ]] || die "--name expects 1 to 8 lower-case letters or digits, got \"$name\""

sw="$name-sw"
node_ns() { echo "$name-n$1"; }
nodes() { ip netns list 2>/dev/null | sed -n "s/^\($name-n[0-9]*\)\( .*\)\{0,1\}$/\1/p" | sort -V; }
count() { nodes | wc -l; }
index_of() {  # a node's address (or index) -> its index
  local h=$1
  if [[ "$h" =~ ^[0-9]+$ ]]; then echo "$h"; return; fi
  [[ "$h" == "$subnet".* ]] || die "no node has the address \"$h\" (nodes are $subnet.1 to $subnet.$(count))"
  local last=${h##*.}
  [[ "$last" =~ ^[0-9]+$ ]] && [ "$last" -ge 1 ] || die "no node has the address \"$h\""
  echo $((last - 1))
}

# tbf on dev (in namespace ns): RATE, with a burst of 2 ms at that rate (at least 128 KiB:
# veth hands tbf segments of up to 64 KiB) and at most 20 ms of queue.
shape() {
  local ns=$1 dev=$2 rate=$3
  ip netns exec "$ns" tc qdisc del dev "$dev" root 2>/dev/null || true
  [ "$rate" = none ] && return 0
  local bits
  bits=$(echo "$rate" | awk '{ r = $1; m = 1;
    if (r ~ /[kK]bit$/) m = 1e3; else if (r ~ /[mM]bit$/) m = 1e6; else if (r ~ /[gG]bit$/) m = 1e9;
    else if (r !~ /bit$/) { print "bad"; exit } sub(/[a-zA-Z]+$/, "", r); if (r + 0 <= 0) { print "bad"; exit }
    printf "%.0f", r * m }')
  [ "$bits" != bad ] || die "--uplink expects a rate like 1gbit or 400mbit, got \"$rate\""
  local burst=$((bits / 8 / 500))
  [ "$burst" -ge 131072 ] || burst=131072
  ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst "$burst" latency 20ms
}

down() {
  local ns
  for ns in $(nodes); do
    # Whatever still runs on a node goes with it.
    ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
    ip netns del "$ns" 2>/dev/null || true
    rm -rf "/etc/netns/$ns"
  done
  ip netns pids "$sw" 2>/dev/null | xargs -r kill -9 2>/dev/null || true
  ip netns del "$sw" 2>/dev/null || true
}

case "$cmd" in
  up)
    n=${1:-}
    [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 64 ] || die "up expects a node count from 2 to 64, got \"$n\""
    [ "$(id -u)" -eq 0 ] || die "up needs root (ip netns, tc)"
    down
    trap 'down; echo "cluster.sh: up failed, removed what it made" >&2' ERR
    ip netns add "$sw"
    ip -n "$sw" link add br0 type bridge
    ip -n "$sw" link set br0 up
    ip -n "$sw" link set lo up
    for ((i = 0; i < n; i++)); do
      ns=$(node_ns "$i")
      ip netns add "$ns"
      ip link add eth0 netns "$ns" type veth peer name "n$i" netns "$sw"
      ip -n "$sw" link set "n$i" master br0 up
      ip -n "$ns" addr add "$subnet.$((i + 1))/24" dev eth0
      ip -n "$ns" link set eth0 up
      ip -n "$ns" link set lo up
      if [ -n "${uplink:-}" ]; then
        shape "$ns" eth0 "$uplink"    # the node's sends
        shape "$sw" "n$i" "$uplink"   # what it receives
      fi
    done
    # Each node's name resolves on every node, as on a cluster (torchrun's c10d
    # rendezvous hands out rank 0's host name): ip netns exec puts
    # /etc/netns/NS/hosts in place of /etc/hosts for what runs on node NS.
    hosts_file=$(printf '127.0.0.1 localhost\n'; for ((i = 0; i < n; i++)); do echo "$subnet.$((i + 1)) $(node_ns "$i")"; done)
    for ((i = 0; i < n; i++)); do
      mkdir -p "/etc/netns/$(node_ns "$i")"
      echo "$hosts_file" >"/etc/netns/$(node_ns "$i")/hosts"
    done
    # Every node reaches every other (bounded: a few seconds for the bridge to learn).
    # (No ping needed: a TCP connection to a closed port is refused once the node answers.)
    for ((i = 1; i < n; i++)); do
      ip netns exec "$(node_ns 0)" timeout 5 bash -c \
        'until err=$( (exec 3<>"/dev/tcp/$0/9") 2>&1 ); [[ "$err" == *refused* ]]; do sleep 0.05; done' \
        "$subnet.$((i + 1))" || { down; die "node 0 cannot reach $subnet.$((i + 1))"; }
    done
    trap - ERR
    echo "cluster.sh: $n nodes up ($subnet.1 to $subnet.$n), uplinks ${uplink:-unshaped}"
    ;;
  down)
    down
    ;;
  hosts)
    slots=${1:-1}
    [[ "$slots" =~ ^[1-9][0-9]*$ ]] || die "hosts expects a slot count, got \"$slots\""
    k=$(count)
    [ "$k" -gt 0 ] || die "no cluster \"$name\" is up (scripts/cluster.sh up N)"
    out=""
    for ((i = 0; i < k; i++)); do out+="${out:+,}$subnet.$((i + 1)):$slots"; done
    echo "$out"
    ;;
  agent | exec)
    [ $# -ge 2 ] || die "$cmd expects a host and a command"
    i=$(index_of "$1")
    shift
    ns=$(node_ns "$i")
    ip netns list | grep -q "^$ns\b" || die "node $i ($ns) is not up"
    [ "$cmd" = exec ] && exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && exec "$@"' "$ns" "$@"
    # As ssh does: the words joined by spaces, run by a shell (Open MPI quotes for that).
    exec ip netns exec "$ns" unshare --uts sh -c 'hostname "$0" && eval "$1"' "$ns" "$*"
    ;;
  uplink)
    [ $# -eq 2 ] || die "uplink expects RATE|down|up and a host"
    i=$(index_of "$2")
    ns=$(node_ns "$i")
    case "$1" in
      down) ip -n "$ns" link set eth0 down ;;
      up) ip -n "$ns" link set eth0 up ;;
      *) shape "$ns" eth0 "$1"; shape "$sw" "n$i" "$1" ;;
    esac
    ;;
  *)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    [ -z "$cmd" ] || [ "$cmd" = help ] || [ "$cmd" = -h ] || exit 2
    ;;
esac

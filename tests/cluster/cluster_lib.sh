# tests/cluster/cluster_lib.sh: what the cluster tests share (sourced). cluster_up
# TEST NAME N: skipped (exit 77) without root and ip netns; else N nodes of
# scripts/cluster.sh named NAME, 1 Gbit/s uplinks, removed when the test exits, and
# sets cluster (the script and its name), agent (mdring-run's --agent) and hosts
# (2 slots each). The test defines fail().
cluster_up() {
  local test=$1 name=$2 n=$3 root
  root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
  cluster=("$root/scripts/cluster.sh" --name "$name")
  agent="$root/scripts/cluster.sh --name $name agent"
  if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null || ! ip netns add "$name-probe" 2>/dev/null; then
    echo "$test: skipped (needs root and ip netns)"
    exit 77
  fi
  ip netns del "$name-probe"
  trap '"${cluster[@]}" down' EXIT
  "${cluster[@]}" up "$n" --uplink 1gbit || fail "cluster.sh up"
  hosts=$("${cluster[@]}" hosts 2)
}

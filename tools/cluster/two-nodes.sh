#!/usr/bin/env bash
# A two-node cluster on this machine, made of Linux namespaces, for running the real launchers across
# nodes (CI runs the cluster tests under it: tests/cluster). Root only, as tools/slurm/local-cluster.sh.
#
#   tools/cluster/two-nodes.sh start             # makes node1 and node2; prints the time it took
#   tools/cluster/two-nodes.sh status            # the nodes, their addresses, a ping; exit 1 when down
#   tools/cluster/two-nodes.sh mpirun ARGS...    # Open MPI's mpirun ARGS... from node1 across both nodes
#   tools/cluster/two-nodes.sh exec NODE CMD...  # CMD on one node (its hostname, disk, /dev/shm, network)
#   tools/cluster/two-nodes.sh ps NODE           # the processes on NODE: pid and name
#   tools/cluster/two-nodes.sh kill NODE         # SIGKILL to every process on NODE (a node that dies)
#   tools/cluster/two-nodes.sh disk              # the node-local disk's path (the same on each node)
#   tools/cluster/two-nodes.sh cut|mend          # the link between the nodes down, or up again
#   tools/cluster/two-nodes.sh stop              # kills what runs on the nodes, removes everything
#
# Each node is a process holding its own namespaces: UTS (hostname node1, node2), mount (its own
# node-local disk, a tmpfs at $MLPH_CLUSTER_DIR/local, and its own /dev/shm; its own /etc/hosts
# naming the two nodes) and network (a veth pair between the two nodes' namespaces, 10.239.39.1 and
# .2/30, and each node's loopback: no route leaves the machine). Everything else (the file system
# with the build, data, outputs and checkpoints) is shared, as a cluster's parallel file system is.
#
# `mpirun` runs Open MPI's mpirun inside node1 with a hostfile of both nodes (slots = this machine's
# cores each); Open MPI starts its daemon on node2 through the launcher agent `agent` (plm_rsh_agent,
# in place of ssh), which enters node2's namespaces. The ranks talk over TCP on the veth pair (btl
# tcp between the nodes, vader within one). Place ranks as on any cluster: `-np 4 --map-by ppr:2:node`.
#
# `start` is idempotent (a cluster that is up is left as it is; a half one is stopped first); `stop`
# is safe to call any time, also when nothing is up. Environment:
#   MLPH_CLUSTER_DIR       state: pid files, hostfile, agent, hosts, logs; the local disks' mount point
#                          (default ${TMPDIR:-/tmp}/mlph-cluster)
#   MLPH_CLUSTER_DISK_MB   each node's local disk (tmpfs) and /dev/shm size (default 512)
set -euo pipefail

dir=${MLPH_CLUSTER_DIR:-${TMPDIR:-/tmp}/mlph-cluster}
disk_mb=${MLPH_CLUSTER_DISK_MB:-512}
nodes=(node1 node2)
net=mlph-cluster-  # the network namespaces' prefix (ip netns)
subnet=10.239.39.0/30
declare -A address=([node1]=10.239.39.1 [node2]=10.239.39.2)
declare -A link=([node1]=mlph-veth1 [node2]=mlph-veth2)

say() { echo "two-nodes: $*" >&2; }
die() { say "error: $*"; exit 1; }

holder() { cat "$dir/$1.pid" 2>/dev/null; }
node_up() { local pid; pid=$(holder "$1") && [ -n "$pid" ] && kill -0 "$pid" 2>/dev/null; }
up() { node_up node1 && node_up node2 && ip netns list | grep -q "^${net}node2"; }
# Both ends of the veth pair up with a carrier (a veth end has one only while its peer is up).
link_up() {
  ip -n "${net}node1" link show "${link[node1]}" 2>/dev/null | grep -q 'state UP' &&
    ip -n "${net}node2" link show "${link[node2]}" 2>/dev/null | grep -q 'state UP'
}
known_node() { [ "$1" = node1 ] || [ "$1" = node2 ] || die "no node '$1' (node1, node2)"; }

need() {
  [ "$(id -u)" -eq 0 ] || die "run it as root: it makes namespaces, mounts and a network"
  local missing=()
  for tool in ip nsenter unshare mpirun; do command -v "$tool" >/dev/null || missing+=("$tool"); done
  [ ${#missing[@]} -eq 0 ] || die "missing ${missing[*]} (iproute2, util-linux, openmpi-bin)"
}

# Enters NODE's namespaces (network, mount, UTS) and runs the rest there, in the caller's directory.
on() {
  local node=$1; shift
  nsenter -t "$(holder "$node")" -n -m -u --wd="$PWD" -- "$@"
}

write_files() {
  mkdir -p "$dir/local" "$dir/log"
  cat >"$dir/hosts" <<EOF
127.0.0.1 localhost
${address[node1]} node1
${address[node2]} node2
EOF
  local cores
  cores=$(nproc)
  printf 'node1 slots=%s\nnode2 slots=%s\n' "$cores" "$cores" >"$dir/hostfile"
  # Open MPI calls the agent as it would ssh: `agent HOST COMMAND...`, the command for a shell.
  cat >"$dir/agent" <<EOF
#!/bin/sh
# plm_rsh_agent of tools/cluster/two-nodes.sh: runs a command on a node of the cluster in $dir.
node=\$1; shift
pid=\$(cat "$dir/\$node.pid") || exit 255
exec nsenter -t "\$pid" -n -m -u -- /bin/sh -c "\$*"
EOF
  chmod 755 "$dir/agent"
}

# A node: a process that holds new UTS and mount namespaces inside the node's network namespace,
# its hostname set and its disk, /dev/shm and /etc/hosts mounted (private: nothing leaks out).
start_node() {
  local node=$1
  ip netns add "$net$node"
  setsid nsenter --net="/run/netns/$net$node" -- unshare --mount --uts --propagation private -- /bin/sh -c "
    set -e
    hostname $node
    mount -t tmpfs -o size=${disk_mb}m,mode=1777 $node-local '$dir/local'
    mount -t tmpfs -o size=${disk_mb}m,mode=1777 $node-shm /dev/shm
    mount --bind '$dir/hosts' /etc/hosts
    echo \$\$ >'$dir/$node.pid.new'
    mv '$dir/$node.pid.new' '$dir/$node.pid'
    cd /
    exec sleep infinity" </dev/null >"$dir/log/$node.log" 2>&1 &
}

wire() {
  ip link add "${link[node1]}" netns "${net}node1" type veth peer name "${link[node2]}" netns "${net}node2"
  for node in "${nodes[@]}"; do
    ip -n "$net$node" link set lo up
    ip -n "$net$node" addr add "${address[$node]}/30" dev "${link[$node]}"
    ip -n "$net$node" link set "${link[$node]}" up
  done
}

start() {
  need
  if up; then say "already up ($dir)"; return; fi
  stop >/dev/null 2>&1 || true
  local began
  began=$(date +%s%N)
  write_files
  for node in "${nodes[@]}"; do start_node "$node"; done
  wire
  for _ in $(seq 100); do node_up node1 && node_up node2 && break; sleep 0.05; done
  up || { cat "$dir"/log/*.log >&2; die "the nodes did not come up"; }
  for _ in $(seq 100); do link_up && break; sleep 0.05; done
  link_up || die "the link between the nodes is not up: $(ip -n "${net}node1" -br link show "${link[node1]}")"
  say "up in $(( ($(date +%s%N) - began) / 1000000 )) ms: node1 ${address[node1]}, node2 ${address[node2]}," \
      "local disk $dir/local and /dev/shm of ${disk_mb} MiB each ($dir)"
}

# The pids of every process in NODE's namespaces but the node's own holder.
node_pids() {
  local node=$1 pid mine
  pid=$(holder "$node") || return 0
  mine=$(readlink "/proc/$pid/ns/uts" 2>/dev/null) || return 0
  for proc in /proc/[0-9]*; do
    [ "${proc#/proc/}" = "$pid" ] && continue
    [ "$(readlink "$proc/ns/uts" 2>/dev/null)" = "$mine" ] && echo "${proc#/proc/}"
  done
  return 0
}

kill_node() {
  local pids
  pids=$(node_pids "$1")
  [ -z "$pids" ] || kill -9 $pids 2>/dev/null || true
  for _ in $(seq 50); do [ -z "$(node_pids "$1")" ] && return; sleep 0.1; done
}

stop() {
  for node in "${nodes[@]}"; do
    kill_node "$node"
    local pid
    if pid=$(holder "$node") && [ -n "$pid" ]; then
      kill -9 "$pid" 2>/dev/null || true
      for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    fi
    rm -f "$dir/$node.pid" "$dir/$node.pid.new"
    ip netns del "$net$node" 2>/dev/null || true  # takes its end of the veth pair, so the pair, with it
  done
  say "stopped"
}

# exec: a signal to this script (a test's timeout) reaches mpirun, which passes it on to every rank.
mpirun_across() {
  up || die "the cluster is down: tools/cluster/two-nodes.sh start"
  # As root (CI, containers) and without cross-memory attach (refused inside most containers).
  exec nsenter -t "$(holder node1)" -n -m -u --wd="$PWD" -- env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    mpirun --hostfile "$dir/hostfile" --mca plm_rsh_agent "$dir/agent" \
    --mca btl tcp,vader,self --mca btl_vader_single_copy_mechanism none \
    --mca btl_tcp_if_include "$subnet" --mca oob_tcp_if_include "$subnet" "$@"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  disk) echo "$dir/local" ;;
  status)
    if up; then
      for node in "${nodes[@]}"; do
        echo "$node: $(on "$node" hostname) ${address[$node]}, local disk $(on "$node" df -h --output=size,used "$dir/local" | tail -n 1 | xargs), $(node_pids "$node" | wc -l) processes"
      done
      echo "link: $(ip -n "${net}node1" -br link show "${link[node1]}" | xargs), route to node2: $(on node1 ip route get "${address[node2]}" | head -n 1 | xargs)"
    else
      say "down ($dir)"
      exit 1
    fi
    ;;
  mpirun) shift; mpirun_across "$@" ;;
  exec)
    [ $# -ge 3 ] || die "usage: two-nodes.sh exec NODE COMMAND..."
    known_node "$2"; up || die "the cluster is down"
    node=$2; shift 2; on "$node" "$@"
    ;;
  ps)
    [ $# -eq 2 ] || die "usage: two-nodes.sh ps NODE"; known_node "$2"
    for pid in $(node_pids "$2"); do echo "$pid $(cat "/proc/$pid/comm" 2>/dev/null)"; done
    ;;
  kill) [ $# -eq 2 ] || die "usage: two-nodes.sh kill NODE"; known_node "$2"; kill_node "$2" ;;
  cut) ip -n "${net}node2" link set "${link[node2]}" down ;;
  mend) ip -n "${net}node2" link set "${link[node2]}" up ;;
  *) echo "usage: tools/cluster/two-nodes.sh start|stop|status|mpirun ARGS...|exec NODE CMD...|ps NODE|kill NODE|cut|mend|disk" >&2; exit 2 ;;
esac

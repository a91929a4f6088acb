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
#   tools/cluster/two-nodes.sh slurm start       # Slurm across both nodes (slurmctld on node1, a slurmd each)
#   tools/cluster/two-nodes.sh slurm run CMD...  # a Slurm client on node1 (sbatch -N 2, srun, squeue, ...)
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
pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }
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
  slurm_stop
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

# ---- Slurm across the two nodes (`slurm start`): slurmctld and a slurmd on node1, a slurmd on node2,
# MUNGE on this machine (its socket is a file both nodes see). Clients run on node1 (`slurm run`),
# where slurmctld listens. The nodes' CPUs are the machine's, each node offering all of them.
slurm_dir=$dir/slurm
slurm_conf=$slurm_dir/slurm.conf

slurm_write_conf() {
  local cpus
  cpus=$(nproc)
  cat >"$slurm_conf" <<EOF
# Written by tools/cluster/two-nodes.sh: Slurm across node1 and node2, state in $slurm_dir.
ClusterName=mlph2
SlurmctldHost=node1(${address[node1]})
SlurmctldPort=6817
SlurmdPort=6818
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$slurm_dir/munge/munge.socket,cred_expire=10
StateSaveLocation=$slurm_dir/state
SlurmdSpoolDir=$slurm_dir/spool-%n
SlurmctldPidFile=$slurm_dir/slurmctld.pid
SlurmdPidFile=$slurm_dir/slurmd-%n.pid
SlurmctldLogFile=$slurm_dir/log/slurmctld.log
SlurmdLogFile=$slurm_dir/log/slurmd-%n.log
$(cat "$(dirname "${BASH_SOURCE[0]}")/../slurm/policy.conf")
SelectTypeParameters=CR_Core
NodeName=node1 NodeAddr=${address[node1]} CPUs=$cpus State=UNKNOWN
NodeName=node2 NodeAddr=${address[node2]} CPUs=$cpus State=UNKNOWN
PartitionName=two Nodes=node1,node2 Default=YES MaxTime=INFINITE State=UP
TmpFS=$dir/local
EOF
  # PMIx's client directories (/tmp/spmix_appdir_<uid>_<step> by default) would collide in the /tmp
  # both nodes share: on each node's own disk instead.
  echo "PMIxCliTmpDirBase=$dir/local" >"$slurm_dir/mpi.conf"
}

slurm_up() { [ -f "$slurm_conf" ] && on node1 env SLURM_CONF="$slurm_conf" timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"; }

slurm_start() {
  up || die "the cluster is down: tools/cluster/two-nodes.sh start"
  for tool in munged slurmctld slurmd sbatch srun scontrol sinfo; do
    command -v "$tool" >/dev/null || die "missing $tool: tools/setup.sh slurm installs Slurm and MUNGE"
  done
  if slurm_up; then
    # A node's slurmd killed with the node (kill NODE) comes back; ReturnToService=2 takes the node again.
    for node in "${nodes[@]}"; do
      pid_alive "$slurm_dir/slurmd-$node.pid" || on "$node" env SLURM_CONF="$slurm_conf" slurmd -N "$node" ||
        die "slurmd did not start on $node"
    done
    slurm_wait_for_nodes
    return
  fi
  slurm_stop >/dev/null 2>&1 || true
  rm -rf "$slurm_dir/state" "$slurm_dir"/spool-*
  mkdir -p "$slurm_dir/munge" "$slurm_dir/state" "$slurm_dir/log"
  chmod 711 "$slurm_dir" "$slurm_dir/munge"
  if [ ! -s "$slurm_dir/munge/munge.key" ]; then
    dd if=/dev/urandom of="$slurm_dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$slurm_dir/munge/munge.key"
  fi
  munged --key-file="$slurm_dir/munge/munge.key" --socket="$slurm_dir/munge/munge.socket" \
    --pid-file="$slurm_dir/munge/munged.pid" --log-file="$slurm_dir/log/munged.log" \
    --seed-file="$slurm_dir/munge/munged.seed" || die "munged did not start"
  slurm_write_conf
  on node1 env SLURM_CONF="$slurm_conf" slurmctld -i || { tail -n 20 "$slurm_dir/log/slurmctld.log" >&2; die "slurmctld did not start"; }
  for node in "${nodes[@]}"; do
    on "$node" env SLURM_CONF="$slurm_conf" slurmd -N "$node" ||
      { tail -n 20 "$slurm_dir/log/slurmd-$node.log" >&2; die "slurmd did not start on $node"; }
  done
  slurm_wait_for_nodes
}

slurm_wait_for_nodes() {
  for _ in $(seq 150); do
    if [ "$(on node1 env SLURM_CONF="$slurm_conf" sinfo -h -N -t idle,mix,alloc -o %N 2>/dev/null | sort -u | wc -l)" -eq 2 ]; then
      say "Slurm up on node1 and node2 ($slurm_conf); clients: tools/cluster/two-nodes.sh slurm run CMD..."
      return
    fi
    sleep 0.2
  done
  tail -n 10 "$slurm_dir/log/slurmctld.log" >&2
  die "the Slurm nodes did not come up within 30 s"
}

# Jobs cancelled first; the daemons are the nodes' processes (stop kills them) but MUNGE's.
slurm_stop() {
  if slurm_up; then
    local jobs
    jobs=$(on node1 env SLURM_CONF="$slurm_conf" squeue -h -o %A 2>/dev/null || true)
    [ -z "$jobs" ] || on node1 env SLURM_CONF="$slurm_conf" scancel --quiet --full $jobs || true
    for _ in $(seq 50); do [ -z "$(on node1 env SLURM_CONF="$slurm_conf" squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  for file in "$slurm_dir"/slurmd-*.pid "$slurm_dir/slurmctld.pid" "$slurm_dir/munge/munged.pid"; do
    [ -f "$file" ] || continue
    kill "$(cat "$file")" 2>/dev/null || true
    rm -f "$file"
  done
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
  slurm)
    case "${2:-}" in
      start) slurm_start ;;
      stop) slurm_stop ;;
      run) [ $# -ge 3 ] || die "usage: two-nodes.sh slurm run CMD..."; shift 2
           up || die "the cluster is down"
           exec nsenter -t "$(holder node1)" -n -m -u --wd="$PWD" -- env SLURM_CONF="$slurm_conf" "$@" ;;
      *) die "usage: two-nodes.sh slurm start|stop|run CMD..." ;;
    esac
    ;;
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
  *) echo "usage: tools/cluster/two-nodes.sh start|stop|status|mpirun ARGS...|slurm start|stop|run CMD...|exec NODE CMD...|ps NODE|kill NODE|cut|mend|disk" >&2; exit 2 ;;
esac

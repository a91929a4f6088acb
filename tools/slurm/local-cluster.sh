#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for trying and testing the job scripts beside this file
# (CI runs the Slurm tests under it). Debian 12's Slurm 22.05 and MUNGE, started as root without
# systemd or cgroups; everything it writes is under one scratch folder.
#
#   eval "$(tools/slurm/local-cluster.sh start)"   # prints `export SLURM_CONF=...` for the clients
#   tools/slurm/local-cluster.sh status            # the node and the queue; exit 1 when it is down
#   tools/slurm/local-cluster.sh env               # the export line again
#   tools/slurm/local-cluster.sh stop              # cancels what runs, stops the daemons
#
# `start` is idempotent: a cluster that answers is left as it is; one half up is stopped and started
# afresh, with empty state. Environment:
#   MLPH_SLURM_DIR   the scratch folder (default ${TMPDIR:-/tmp}/mlph-slurm): munge key and socket,
#                    slurm.conf, spool, state, logs, pid files
#   MLPH_SLURM_PORT  slurmctld's port (default 6817); slurmd takes the next one
#
# The node is this machine as `slurmd -C` sees it (CPUs, sockets, cores, threads, memory), memory
# counted (CR_Core_Memory, a CPU's share of it by default). Plug-ins that work without cgroups:
# proctrack/linuxproc and task/affinity (srun --cpu-bind works). MpiDefault=pmix. A requeued job
# waits cred_expire + 1 s before it starts again: 11 s here (Slurm's default is 121 s).
set -euo pipefail

dir=${MLPH_SLURM_DIR:-${TMPDIR:-/tmp}/mlph-slurm}
port=${MLPH_SLURM_PORT:-6817}
conf=$dir/slurm.conf
munge_socket=$dir/munge/munge.socket
host=$(hostname -s)

say() { echo "local-cluster: $*" >&2; }
die() { say "error: $*"; exit 1; }

pid_alive() { [ -f "$1" ] && kill -0 "$(cat "$1")" 2>/dev/null; }

up() {
  [ -f "$conf" ] && pid_alive "$dir/slurmctld.pid" && pid_alive "$dir/slurmd.pid" &&
    SLURM_CONF=$conf timeout 10 scontrol ping 2>/dev/null | grep -q "is UP"
}

need() {
  local missing=()
  for tool in munged munge slurmctld slurmd sbatch srun scontrol sinfo; do
    command -v "$tool" >/dev/null || missing+=("$tool")
  done
  [ ${#missing[@]} -eq 0 ] ||
    die "missing ${missing[*]}: install slurmctld slurmd slurm-client munge slurm-wlm-basic-plugins (tools/setup.sh slurm does)"
  compgen -G "/usr/lib/*/slurm-wlm/mpi_pmix*.so" >/dev/null ||
    die "Slurm's pmix plug-in (mpi_pmix.so) is missing: install slurm-wlm-basic-plugins"
  [ "$(id -u)" -eq 0 ] || die "run it as root: slurmd starts every user's tasks"
}

# Stops the process a pid file names, politely first.
stop_daemon() {
  local file=$1
  pid_alive "$file" || { rm -f "$file"; return 0; }
  local pid
  pid=$(cat "$file")
  kill "$pid" 2>/dev/null || true
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -9 "$pid" 2>/dev/null || true
  rm -f "$file"
}

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

write_conf() {
  # The machine as slurmd sees it; where that disagrees with the CPUs this process may use (a
  # container's cpuset), the usable count alone.
  local node cpus
  node=$(slurmd -C | head -n 1 | sed "s/^NodeName=[^ ]*/NodeName=$host/")
  cpus=$(echo "$node" | sed -n 's/.* CPUs=\([0-9]*\).*/\1/p')
  if [ "$cpus" != "$(nproc)" ]; then
    cpus=$(nproc)
    node="NodeName=$host CPUs=$cpus $(echo "$node" | grep -o 'RealMemory=[0-9]*')"
  fi
  local memory
  memory=$(echo "$node" | sed -n 's/.*RealMemory=\([0-9]*\).*/\1/p')
  cat >"$conf" <<EOF
# Written by tools/slurm/local-cluster.sh: a one-node cluster on $host, state in $dir.
ClusterName=mlph
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$munge_socket,cred_expire=10
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
$(cat "$(dirname "${BASH_SOURCE[0]}")/policy.conf")
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=$((memory / cpus))
$node NodeAddr=127.0.0.1 State=UNKNOWN
PartitionName=local Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
}

start() {
  need
  if up; then
    say "already up ($conf)"
    echo "export SLURM_CONF=$conf"
    return
  fi
  stop >/dev/null 2>&1 || true
  port_free "$port" || die "port $port is taken (another slurmctld?): set MLPH_SLURM_PORT"
  port_free $((port + 1)) || die "port $((port + 1)) is taken (another slurmd?): set MLPH_SLURM_PORT"
  rm -rf "$dir/state" "$dir/spool"
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 711 "$dir" "$dir/munge"  # munged: its socket's folders must be reachable by all
  if [ ! -s "$dir/munge/munge.key" ]; then
    dd if=/dev/urandom of="$dir/munge/munge.key" bs=1024 count=1 status=none
    chmod 400 "$dir/munge/munge.key"
  fi
  munged --key-file="$dir/munge/munge.key" --socket="$munge_socket" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" ||
    { tail -n 5 "$dir/log/munged.log" >&2; die "munged did not start"; }
  write_conf
  export SLURM_CONF=$conf
  slurmctld -i || { tail -n 20 "$dir/log/slurmctld.log" >&2; die "slurmctld did not start"; }
  slurmd -N "$host" || { tail -n 20 "$dir/log/slurmd.log" >&2; die "slurmd did not start"; }
  for _ in $(seq 150); do
    case $(sinfo -h -N -n "$host" -o %t 2>/dev/null) in
      idle*|mix*|alloc*)
        say "up: $(sinfo -h -N -n "$host" -o '%N, %c CPUs, %m MB') ($conf)"
        echo "export SLURM_CONF=$conf"
        return
        ;;
    esac
    sleep 0.2
  done
  tail -n 10 "$dir/log/slurmctld.log" "$dir/log/slurmd.log" >&2
  die "the node did not come up within 30 s ($(sinfo -h -N -o '%N %t %E' 2>&1))"
}

stop() {
  if up; then  # jobs first, so that no task outlives the daemons
    export SLURM_CONF=$conf
    scancel --quiet --full $(squeue -h -o %A) 2>/dev/null || true
    for _ in $(seq 50); do [ -z "$(squeue -h -o %A 2>/dev/null)" ] && break; sleep 0.2; done
  fi
  stop_daemon "$dir/slurmd.pid"
  stop_daemon "$dir/slurmctld.pid"
  stop_daemon "$dir/munge/munged.pid"
  say "stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  env) echo "export SLURM_CONF=$conf" ;;
  status)
    if up; then
      SLURM_CONF=$conf sinfo -N -o '%N %t %c %m'
      SLURM_CONF=$conf squeue
    else
      say "down ($dir)"
      exit 1
    fi
    ;;
  *) echo "usage: tools/slurm/local-cluster.sh start|stop|status|env" >&2; exit 2 ;;
esac

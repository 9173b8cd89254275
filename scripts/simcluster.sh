#!/usr/bin/env bash
# A simulated cluster on this machine: N "nodes", each a network namespace plus a UTS namespace
# (hostname nodeI, its own address) on a bridge, optional link caps (tc tbf), a real Slurm
# (slurmctld + one slurmd per node, munge) and a launcher so that mpiexec starts ranks across nodes.
# Needs root. Touches nothing it did not create; distinct --name values give independent clusters.
#
#   scripts/simcluster.sh up [--nodes N] [--rate 1gbit] [--name P] [--slurm] [--cpus C]
#   scripts/simcluster.sh down [--name P] | down --all
#   scripts/simcluster.sh status [--name P]
#   scripts/simcluster.sh env [--name P]           # shell exports: SLURM_CONF, SIMCLUSTER_* ...
#   scripts/simcluster.sh exec [--name P] nodeI CMD...  # run CMD on node I (its net + UTS namespace)
#   scripts/simcluster.sh mpiexec [--name P] [--ppn K] [--nodes-used M] [--netmod ofi|ucx] -- CMD...
#       runs $MPIEXEC (default: .venv/bin/mpiexec, the mpich wheel) with K ranks on each of the
#       first M nodes (default: all), via the cluster's launcher
#   scripts/simcluster.sh kill [--name P] nodeI     # node I dies: link down, all its processes killed
#   scripts/simcluster.sh check                     # exit 0 if a cluster can be built here, else why
#
# Naming (P: 1-8 characters [a-z0-9], default "sc"): namespaces P-node1.., bridge P-br, veths
# P-vI (bridge side) / eth0 (node side), subnet 10.213.K.0/24 (K from P; override --subnet
# 10.213.7), bridge address .254, node I at .I, slurmctld port 17000+K, state in /tmp/simcluster-P.
# `up` first removes what a previous `up` of the same P left behind (idempotent).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
NAME=sc
NODES=2
RATE=""
SLURM=0
CPUS=4
SUBNET=""
PPN=1
NODES_USED=""
NETMOD=${SIMCLUSTER_NETMOD:-ofi}

die() { echo "simcluster: $*" >&2; exit 2; }

cmd=${1:-}
[ -n "$cmd" ] || die "usage: simcluster.sh up|down|status|env|exec|mpiexec|kill|check [options] (see the top of this file)"
shift
EXEC_ARGS=()
while [ $# -gt 0 ]; do
  case $1 in
    --name) NAME=$2; shift 2 ;;
    --nodes) NODES=$2; shift 2 ;;
    --rate) RATE=$2; shift 2 ;;
    --slurm) SLURM=1; shift ;;
    --cpus) CPUS=$2; shift 2 ;;
    --subnet) SUBNET=$2; shift 2 ;;
    --ppn) PPN=$2; shift 2 ;;
    --nodes-used) NODES_USED=$2; shift 2 ;;
    --netmod) NETMOD=$2; shift 2 ;;
    --all) NAME=__all__; shift ;;
    --) shift; EXEC_ARGS=("$@"); break ;;
    *) EXEC_ARGS=("$@"); break ;;
  esac
done

if [ "$NAME" != __all__ ]; then
  [[ $NAME =~ ^[a-z0-9]{1,8}$ ]] || die "--name must be 1-8 characters a-z0-9, got '$NAME'"
fi
[[ $NODES =~ ^[0-9]+$ ]] && [ "$NODES" -ge 1 ] && [ "$NODES" -le 64 ] || die "--nodes must be 1..64, got '$NODES'"

K=$(( $(printf '%s' "$NAME" | cksum | cut -d' ' -f1) % 200 + 20 ))
[ -n "$SUBNET" ] || SUBNET=10.213.$K
BRIDGE_IP=$SUBNET.254
STATE=/tmp/simcluster-$NAME
BR=$NAME-br
CTLD_PORT=$(( 17000 + K ))

ns() { echo "$NAME-node$1"; }

# Run a command inside node I: its network namespace (ip netns exec also gives a private mount
# namespace with the node's own /sys) and a fresh UTS namespace named nodeI.
in_node() {
  local i=$1; shift
  ip netns exec "$(ns "$i")" unshare --uts sh -c 'hostname "$0" && exec "$@"' "node$i" "$@"
}

check() {
  [ "$(id -u)" -eq 0 ] || { echo "not root (network namespaces need root)"; return 1; }
  command -v ip >/dev/null && command -v unshare >/dev/null && command -v tc >/dev/null \
    || { echo "ip, tc or unshare missing"; return 1; }
  local probe=simclprobe$$
  ip netns add "$probe" 2>/dev/null || { echo "cannot create a network namespace"; return 1; }
  local ok=0
  ip netns exec "$probe" unshare --uts true 2>/dev/null || ok=1
  ip netns del "$probe"
  [ $ok -eq 0 ] || { echo "cannot create a UTS namespace inside a network namespace"; return 1; }
  return 0
}

kill_pidfile() {  # kill_pidfile FILE: kill the daemon whose pid is in FILE if its command line names STATE
  local f=$1 pid
  [ -f "$f" ] || return 0
  pid=$(cat "$f" 2>/dev/null || true)
  if [ -n "$pid" ] && [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$STATE"; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 1 30); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
}

kill_nodes() {  # kill_nodes NETNS...: SIGKILL every process in these node namespaces
  local n f keep=" "
  for f in "$STATE"/spool/slurmd.*.pid; do [ -f "$f" ] && keep+="$(cat "$f") "; done
  # Every process inside this cluster's namespaces (slurmd, job steps, ranks) was started by us:
  # first all but the slurmds, then empty the named cgroup hierarchies the slurmds used (children
  # first, so the kernel frees them), then the slurmds.
  for n in "$@"; do
    for f in $(ip netns pids "$n" 2>/dev/null || true); do
      [[ $keep == *" $f "* ]] || kill -9 "$f" 2>/dev/null || true
    done
  done
  for n in "$@"; do
    for f in $(ip netns pids "$n" 2>/dev/null || true); do
      [[ $keep == *" $f "* ]] || continue
      nsenter -t "$f" -m sh -c 'find /sys/fs/cgroup/systemd -mindepth 1 -depth -type d -exec rmdir {} + ' \
        2>/dev/null || true
    done
  done
  for n in "$@"; do
    f=$(ip netns pids "$n" 2>/dev/null || true)
    [ -z "$f" ] || kill -9 $f 2>/dev/null || true
  done
}

down_one() {
  local n
  # shellcheck disable=SC2046
  kill_nodes $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-node[0-9]+$" || true)
  kill_pidfile "$STATE/slurmctld.pid"
  kill_pidfile "$STATE/munge/munged.pid"
  for n in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-node[0-9]+$" || true); do
    ip netns del "$n" 2>/dev/null || true
  done
  for n in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$NAME-v[0-9]+$" || true); do
    ip link del "$n" 2>/dev/null || true
  done
  ip link show "$BR" >/dev/null 2>&1 && ip link del "$BR"
  rm -rf "$STATE"
}

write_slurm_conf() {
  local i host
  host=$(hostname -s)
  mkdir -p "$STATE/ctld" "$STATE/log" "$STATE/spool"
  cat >"$STATE/slurm.conf" <<EOF
# generated by scripts/simcluster.sh (cluster $NAME)
ClusterName=sim$NAME
SlurmctldHost=$host($BRIDGE_IP)
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$STATE/munge/munge.sock,cred_expire=30
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$STATE/ctld
SlurmdSpoolDir=$STATE/spool/%n
SlurmctldPidFile=$STATE/slurmctld.pid
SlurmdPidFile=$STATE/spool/slurmd.%n.pid
SlurmctldLogFile=$STATE/log/slurmctld.log
SlurmdLogFile=$STATE/log/slurmd.%n.log
SlurmdParameters=config_overrides
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=pmi2
ReturnToService=2
MailProg=/bin/true
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
MinJobAge=30
KillWait=30
EOF
  for i in $(seq 1 "$NODES"); do
    echo "NodeName=node$i NodeAddr=$SUBNET.$i CPUs=$CPUS RealMemory=1000 State=UNKNOWN" >>"$STATE/slurm.conf"
  done
  echo "PartitionName=sim Nodes=ALL Default=YES MaxTime=INFINITE State=UP" >>"$STATE/slurm.conf"
}

start_slurm() {
  command -v slurmctld >/dev/null && command -v munged >/dev/null \
    || die "--slurm needs slurm-wlm and munge (apt-get install -y slurm-wlm munge)"
  mkdir -p "$STATE/munge"
  chmod 700 "$STATE/munge"
  dd if=/dev/urandom of="$STATE/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$STATE/munge/munge.key"
  munged --socket="$STATE/munge/munge.sock" --key-file="$STATE/munge/munge.key" \
    --pid-file="$STATE/munge/munged.pid" --log-file="$STATE/munge/munged.log" \
    --seed-file="$STATE/munge/munged.seed" --force
  write_slurm_conf
  slurmctld -f "$STATE/slurm.conf"
  local i
  for i in $(seq 1 "$NODES"); do
    # slurmd 22.05 insists on a cgroup v1 layout with a name=systemd hierarchy. Inside the node's
    # private mount namespace (ip netns exec), give it a tmpfs and a fresh named hierarchy of its
    # own: the machine's cgroups are neither seen nor changed. The node also gets its own /dev/shm,
    # as a real node has, for the job steps slurmd starts: MPICH names a node's shared memory after
    # the Slurm job and step ids ("1.1"), which every simulated cluster numbers from 1, so one
    # shared /dev/shm let a job open another cluster's (or a killed step's) segment and hang in
    # MPI_Init (docs/multi_node.md, "A lost node"). It goes with the node when the node dies.
    in_node "$i" sh -c 'mount -t tmpfs simcluster /sys/fs/cgroup && mkdir /sys/fs/cgroup/systemd &&
      mount -t cgroup -o "none,name=$1" cgroup /sys/fs/cgroup/systemd &&
      mount -t tmpfs -o mode=1777 simshm /dev/shm && exec slurmd -f "$2" -N "$3"' \
      sh "simcluster-$NAME" "$STATE/slurm.conf" "node$i"
  done
  # Wait (bounded) until every node is idle.
  local t
  for t in $(seq 1 60); do
    if SLURM_CONF=$STATE/slurm.conf sinfo -h -o '%T %D' 2>/dev/null | grep -q "^idle $NODES\$"; then
      return 0
    fi
    sleep 0.5
  done
  SLURM_CONF=$STATE/slurm.conf sinfo >&2 || true
  die "Slurm nodes did not become idle within 30 s (logs: $STATE/log)"
}

cap() {  # cap DEV [NETNS]: token bucket at RATE on DEV's egress
  local dev=$1 netns=${2:-} bits burst
  bits=$(numfmt --from=si "$(echo "${RATE%bit}" | tr kmgt KMGT)" 2>/dev/null) || die "--rate must look like 1gbit or 100mbit, got '$RATE'"
  burst=$(( bits / 8 / 250 ))          # 4 ms at the rate
  [ "$burst" -ge 65536 ] || burst=65536  # at least one GSO segment
  if [ -n "$netns" ]; then
    ip netns exec "$netns" tc qdisc add dev "$dev" root tbf rate "$RATE" burst "$burst" latency 100ms
  else
    tc qdisc add dev "$dev" root tbf rate "$RATE" burst "$burst" latency 100ms
  fi
}

write_launcher() {
  # ssh stand-in for hydra (-launcher ssh -launcher-exec): skips ssh options, maps nodeI or
  # SUBNET.I to node I and runs the command string there, as ssh would, through sh -c.
  cat >"$STATE/launcher" <<EOF
#!/bin/bash
while [ \$# -gt 0 ] && [ "\${1#-}" != "\$1" ]; do shift; done
host=\$1; shift
case \$host in
  node*) i=\${host#node} ;;
  $SUBNET.*) i=\${host##*.} ;;
  *) echo "simcluster launcher: unknown host \$host" >&2; exit 255 ;;
esac
exec ip netns exec $NAME-node\$i unshare --uts sh -c 'hostname "\$0" && eval "\$1"' "node\$i" "\$*"
EOF
  chmod +x "$STATE/launcher"
}

write_env() {
  cat >"$STATE/env" <<EOF
export SIMCLUSTER_NAME=$NAME
export SIMCLUSTER_STATE=$STATE
export SIMCLUSTER_NODES=$NODES
export SIMCLUSTER_SUBNET=$SUBNET
export SIMCLUSTER_BRIDGE_IP=$BRIDGE_IP
export SIMCLUSTER_RATE=$RATE
export SIMCLUSTER_LAUNCHER=$STATE/launcher
EOF
  [ "$SLURM" -eq 0 ] || echo "export SLURM_CONF=$STATE/slurm.conf" >>"$STATE/env"
}

up() {
  local why
  why=$(check) || die "cannot build a cluster here: $why"
  down_one
  trap 'rc=$?; if [ $rc -ne 0 ] && [ -z "${SIMCLUSTER_KEEP:-}" ]; then echo "simcluster: up failed; removing what it made" >&2; down_one; fi' EXIT
  if ip -o addr show | grep -q " $SUBNET\."; then
    die "subnet $SUBNET.0/24 is already in use on this machine; pass --subnet 10.213.X"
  fi
  mkdir -p "$STATE"
  ip link add "$BR" type bridge
  ip addr add "$BRIDGE_IP/24" dev "$BR"
  ip link set "$BR" up
  local i n
  for i in $(seq 1 "$NODES"); do
    n=$(ns "$i")
    ip netns add "$n"
    ip link add "$NAME-v$i" type veth peer name eth0 netns "$n"
    ip link set "$NAME-v$i" master "$BR" up
    ip netns exec "$n" ip addr add "$SUBNET.$i/24" dev eth0
    ip netns exec "$n" ip link set eth0 up
    ip netns exec "$n" ip link set lo up
    if [ -n "$RATE" ]; then
      cap "$NAME-v$i"        # towards the node
      cap eth0 "$n"          # from the node
    fi
  done
  write_launcher
  write_env
  [ "$SLURM" -eq 0 ] || start_slurm
  trap - EXIT
  echo "simcluster $NAME: $NODES nodes on $SUBNET.0/24 (bridge $BR at $BRIDGE_IP)${RATE:+, links capped at $RATE}$([ "$SLURM" -eq 1 ] && echo ", Slurm: SLURM_CONF=$STATE/slurm.conf")"
}

status_one() {
  [ -f "$STATE/env" ] || { echo "simcluster $NAME: down"; return 1; }
  cat "$STATE/env"
  ip netns list | grep -E "^$NAME-node" || true
  [ ! -f "$STATE/slurm.conf" ] || SLURM_CONF=$STATE/slurm.conf sinfo || true
}

run_mpiexec() {
  [ -f "$STATE/env" ] || die "cluster $NAME is not up (scripts/simcluster.sh up --name $NAME)"
  # shellcheck disable=SC1091
  . "$STATE/env"
  local m=${NODES_USED:-$SIMCLUSTER_NODES} hosts="" i
  for i in $(seq 1 "$m"); do hosts+="${hosts:+,}node$i:$PPN"; done
  local net=()
  case $NETMOD in
    ofi) net=(-genv MPIR_CVAR_CH4_NETMOD ofi -genv FI_PROVIDER tcp) ;;
    ucx) net=(-genv MPIR_CVAR_CH4_NETMOD ucx -genv UCX_TLS tcp,self) ;;
    *) die "--netmod must be ofi or ucx, got '$NETMOD'" ;;
  esac
  exec "${MPIEXEC:-$ROOT/.venv/bin/mpiexec}" -launcher ssh -launcher-exec "$STATE/launcher" \
    -localhost "$BRIDGE_IP" -hosts "$hosts" -n $(( m * PPN )) "${net[@]}" "${EXEC_ARGS[@]}"
}

case $cmd in
  check) check ;;
  up) up ;;
  down)
    if [ "$NAME" = __all__ ]; then
      for d in /tmp/simcluster-*; do
        [ -d "$d" ] || continue
        "$0" down --name "${d#/tmp/simcluster-}"
      done
    else
      down_one
      echo "simcluster $NAME: down"
    fi ;;
  status) status_one ;;
  env) [ -f "$STATE/env" ] || die "cluster $NAME is not up"; cat "$STATE/env" ;;
  exec)
    [ ${#EXEC_ARGS[@]} -ge 2 ] || die "usage: simcluster.sh exec [--name P] nodeI CMD..."
    node=${EXEC_ARGS[0]}; i=${node#node}
    ip netns list | grep -q "^$(ns "$i") " || ip netns list | grep -q "^$(ns "$i")\$" || die "no node $node in cluster $NAME"
    in_node "$i" "${EXEC_ARGS[@]:1}" ;;
  mpiexec) run_mpiexec ;;
  kill)
    # A node dies: its link goes down first (nothing it sends any more reaches the others), then
    # every process in its namespaces is killed, its slurmd too. The namespace stays (down removes it).
    [ ${#EXEC_ARGS[@]} -eq 1 ] || die "usage: simcluster.sh kill [--name P] nodeI"
    node=${EXEC_ARGS[0]}; i=${node#node}
    ip netns list | grep -qE "^$(ns "$i")( |\$)" || die "no node $node in cluster $NAME"
    ip netns exec "$(ns "$i")" ip link set eth0 down
    kill_nodes "$(ns "$i")"
    echo "simcluster $NAME: $node killed (link down, every process killed)" ;;
  *) die "unknown command '$cmd' (up|down|status|env|exec|mpiexec|kill|check)" ;;
esac

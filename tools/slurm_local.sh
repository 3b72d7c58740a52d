#!/usr/bin/env bash
# Throwaway single-node Slurm cluster on loopback, for tests and demos of the job scripts.
#
# Usage:
#   tools/slurm_local.sh start  [STATEDIR]   write slurm.conf, start munged, slurmctld, slurmd,
#                                            wait until the node is idle, print the export line
#   tools/slurm_local.sh stop   [STATEDIR]   stop the daemons of STATEDIR (files are kept)
#   tools/slurm_local.sh status [STATEDIR]   daemons alive? sinfo/squeue of the cluster
#   STATEDIR defaults to /tmp/trident-slurm.
#
# Typical use (the only thing `start` prints on stdout is the export line, so eval works):
#   eval "$(tools/slurm_local.sh start)"      # exports SLURM_CONF=/tmp/trident-slurm/slurm.conf
#   sbatch --wait -n 2 jobscripts/train.sbatch
#   tools/slurm_local.sh stop
#
# Everything lives under STATEDIR: slurm.conf, munge/ (private key, socket, pid, log, seed),
# spool/ (slurmctld state, slurmd spool), run/ (pid files), log/ (slurmctld.log, slurmd.log).
# Nothing under /etc is changed, with one exception: munged refuses files in a directory that
# it finds insecure (any directory on the path writable by group/others without the sticky bit,
# or owned by someone other than root/munge). For such a STATEDIR munged's socket, pid, log and
# seed go to /run/trident-munge-<hash of STATEDIR>/ instead, with the system key
# /etc/munge/munge.key (created with mungekey, or from /dev/urandom, when missing).
#
# The cluster: one node "localhost" (127.0.0.1) that advertises CPUs=8 whatever the machine has
# (SlurmdParameters=config_overrides), one partition "debug" with OverSubscribe=YES, no accounting
# (sacct does not work; `sbatch --wait` returns the job's exit status), no cgroups
# (proctrack/linuxproc, task/none). MPI: `srun --mpi=pmi2` works, `--mpi=pmix` does not.
#
# Needs root (slurmd runs as root; munged is started as user munge) and the Debian 12 packages
# slurm-wlm and munge (tools/install_deps.sh --test). No systemd is used or needed.
#
# Environment knobs:
#   SLURM_LOCAL_TIMEOUT   seconds to wait for the node to become idle (default 60)
#   SLURM_LOCAL_PORT      slurmctld port; slurmd uses PORT+1 (default 6817, Slurm's own default).
#                         Change it to run two of these clusters at the same time.
#   SLURM_LOCAL_CPUS      CPUs the node advertises (default 8)
#   SLURM_LOCAL_CRED_EXPIRE  AuthInfo cred_expire in seconds (default 20, Slurm's is 120). It is
#                         also the time a requeued job waits before it can start again.
#   SLURM_LOCAL_PREEMPT   REQUEUE or CANCEL: partition-priority preemption with that PreemptMode
#                         and a second partition "urgent" whose jobs preempt those of "debug"
#                         (e.g. `sbatch -p urgent -n 8 --exclusive --wrap "sleep 5"`); unset: none.
set -euo pipefail

prog="slurm_local.sh"
cmd="${1:-}"
# --help: the whole comment block above (commands, environment knobs), on stdout; a usage error
# prints its first lines (the commands) on stderr.
help_text() { awk 'NR > 1 && /^#/ {sub(/^# ?/, ""); print; next} NR > 1 {exit}' "$0"; }
usage() { sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//' >&2; echo "($prog --help also lists the SLURM_LOCAL_* environment knobs)" >&2; }
case "$cmd" in -h|--help|help) help_text; exit 0 ;; esac
state="${2:-/tmp/trident-slurm}"
timeout_s="${SLURM_LOCAL_TIMEOUT:-60}"
port="${SLURM_LOCAL_PORT:-6817}"
cpus="${SLURM_LOCAL_CPUS:-8}"
cred_expire="${SLURM_LOCAL_CRED_EXPIRE:-20}"
preempt="${SLURM_LOCAL_PREEMPT:-}"
case "$preempt" in
  ""|REQUEUE|CANCEL) ;;
  *) echo "$prog: error: SLURM_LOCAL_PREEMPT='$preempt' (expected REQUEUE or CANCEL)" >&2; exit 2 ;;
esac

say() { echo "$prog: $*" >&2; }
die() { echo "$prog: error: $*" >&2; exit 1; }

case "$cmd" in
  start|stop|status) ;;
  *) [ -n "$cmd" ] && echo "$prog: unknown command '$cmd' (start, stop or status)" >&2; usage; exit 2 ;;
esac

# Absolute state dir (the paths go into slurm.conf and to the daemons).
case "$state" in
  /*) ;;
  *) state="$(pwd)/$state" ;;
esac
state="${state%/}"
conf="$state/slurm.conf"
# munged's directory: $state/munge, or the fallback under /run recorded in $state/munge.dir.
mdir_fallback="/run/trident-munge-$(printf '%s' "$state" | cksum | cut -d' ' -f1)"
mdir="$state/munge"
if [ -r "$state/munge.dir" ]; then mdir="$(cat "$state/munge.dir")"; fi
sock="$mdir/munged.socket"

# ---------------------------------------------------------------- process helpers
# pid_of NAME: the pid recorded in run/NAME.pid (or munge/munged.pid) if that process is alive
# and really is NAME (guards against a reused pid after a reboot or a crash).
pidfile_of() {
  case "$1" in
    munged) echo "$mdir/munged.pid" ;;
    *) echo "$state/run/$1.pid" ;;
  esac
}
pid_of() {
  local f pid comm
  f="$(pidfile_of "$1")"
  [ -r "$f" ] || return 1
  pid="$(tr -dc '0-9' < "$f")"
  [ -n "$pid" ] || return 1
  [ -r "/proc/$pid/comm" ] || return 1
  comm="$(cat "/proc/$pid/comm" 2>/dev/null || true)"
  [ "$comm" = "$1" ] || return 1
  echo "$pid"
}

stop_one() {
  local name="$1" pid
  pid="$(pid_of "$name")" || { rm -f "$(pidfile_of "$name")"; return 0; }
  say "stopping $name (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  for _ in $(seq 1 50); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "$name (pid $pid) did not stop after 5 s, sending SIGKILL"
    kill -KILL "$pid" 2>/dev/null || true
    sleep 0.2
  fi
  rm -f "$(pidfile_of "$name")"
}

stop_all() {
  # Order: compute daemon, controller, then the authentication daemon they use.
  stop_one slurmd
  stop_one slurmctld
  stop_one munged
  rm -f "$sock" "$sock.lock"
}

show_logs() {
  local f
  for f in "$mdir/munged.log" "$state/log/slurmctld.log" "$state/log/slurmd.log"; do
    [ -r "$f" ] || continue
    echo "----- last lines of $f" >&2
    tail -n 25 "$f" >&2
  done
}

# After a failed start: show the logs, stop what was started (the logs stay in STATEDIR), exit 1.
fail() {
  show_logs
  stop_all
  die "$* (logs kept in $state/log and $mdir)"
}

# ---------------------------------------------------------------- status
if [ "$cmd" = status ]; then
  [ -f "$conf" ] || { say "no cluster in $state (no slurm.conf)"; exit 1; }
  rc=0
  for d in munged slurmctld slurmd; do
    if pid="$(pid_of "$d")"; then say "$d running (pid $pid)"; else say "$d NOT running"; rc=1; fi
  done
  if [ "$rc" = 0 ]; then
    SLURM_CONF="$conf" sinfo -N -o '%N %T %c %P' >&2 || rc=1
    SLURM_CONF="$conf" squeue >&2 || rc=1
    echo "export SLURM_CONF=$conf"
  fi
  exit "$rc"
fi

# ---------------------------------------------------------------- stop
if [ "$cmd" = stop ]; then
  [ -d "$state" ] || { say "nothing to stop: $state does not exist"; exit 0; }
  stop_all
  say "stopped (state kept in $state; rm -rf it to start from scratch)"
  exit 0
fi

# ---------------------------------------------------------------- start
[ "$(id -u)" -eq 0 ] || die "needs root (slurmd runs as root and munged as user munge)"
for b in munged slurmctld slurmd sinfo; do
  command -v "$b" >/dev/null 2>&1 || [ -x "/usr/sbin/$b" ] ||
    die "$b not found; install slurm-wlm and munge (tools/install_deps.sh --test)"
done
export PATH="$PATH:/usr/sbin:/sbin"
getent passwd munge >/dev/null || die "user munge does not exist (is the munge package installed?)"

# Idempotent: daemons of an earlier start of this state dir go first.
if [ -d "$state" ]; then stop_all; fi

# The ports must be free: otherwise our slurmctld would fail to bind, and sinfo would report the
# node of whichever cluster owns the port.
if command -v ss >/dev/null 2>&1; then
  for p in "$port" "$((port + 1))"; do
    if ss -Htln "sport = :$p" 2>/dev/null | grep -q .; then
      die "port $p is in use (another Slurm cluster?); choose other ports with SLURM_LOCAL_PORT"
    fi
  done
fi

mkdir -p "$state" "$state/run" "$state/log" "$state/spool/ctld" "$state/spool/d"
chmod 0755 "$state" "$state/run" "$state/log" "$state/spool"
chmod 0700 "$state/spool/ctld" "$state/spool/d"
rm -f "$state/log/slurmctld.log" "$state/log/slurmd.log" "$state/munge.dir"

# ---- munge
new_key() {  # new_key PATH: a fresh key owned by munge, mode 0600
  local k="$1"
  if command -v mungekey >/dev/null 2>&1; then
    runuser -u munge -- mungekey --create --keyfile="$k" >/dev/null 2>&1 || true
  fi
  if [ ! -s "$k" ]; then dd if=/dev/urandom of="$k" bs=1 count=1024 status=none; fi
  chown munge:munge "$k"
  chmod 0600 "$k"
}
start_munged() {  # start_munged DIR KEYFILE: munged with socket/pid/log/seed in DIR
  local d="$1" key="$2"
  mkdir -p "$d"
  chown munge:munge "$d"
  chmod 0755 "$d"   # munged: the socket's directory must be searchable by all
  mdir="$d"; sock="$d/munged.socket"
  rm -f "$sock" "$sock.lock" "$d/munged.pid" "$d/munged.log"
  # munged refuses to run as root (without --force), so it runs as the munge user.
  if ! runuser -u munge -- munged \
        --key-file="$key" --socket="$sock" --pid-file="$d/munged.pid" \
        --log-file="$d/munged.log" --seed-file="$d/munged.seed" 2>"$state/log/munged.start.err"; then
    return 1
  fi
  for _ in $(seq 1 50); do
    [ -S "$sock" ] && pid_of munged >/dev/null && return 0
    sleep 0.1
  done
  return 1
}

mkdir -p "$state/munge"
chown munge:munge "$state/munge"
[ -s "$state/munge/munge.key" ] || new_key "$state/munge/munge.key"
if start_munged "$state/munge" "$state/munge/munge.key"; then
  say "munged started with the private key $state/munge/munge.key"
else
  say "munged refused $state/munge:"
  sed 's/^/    /' "$state/log/munged.start.err" >&2 || true
  say "falling back to $mdir_fallback with the system key /etc/munge/munge.key"
  key=/etc/munge/munge.key
  if [ ! -s "$key" ]; then
    say "creating $key"
    mkdir -p /etc/munge
    chown munge:munge /etc/munge
    chmod 0700 /etc/munge
    new_key "$key"
  fi
  start_munged "$mdir_fallback" "$key" || {
    sed 's/^/    /' "$state/log/munged.start.err" >&2 || true
    show_logs; die "munged did not start"; }
  echo "$mdir_fallback" > "$state/munge.dir"
  say "munged started in $mdir_fallback with $key"
fi
# Round trip through the new socket: the daemons authenticate every RPC with it.
if command -v munge >/dev/null 2>&1 && command -v unmunge >/dev/null 2>&1; then
  munge -S "$sock" -n | unmunge -S "$sock" >/dev/null 2>&1 ||
    fail "munge credential round trip through $sock failed"
fi

# ---- slurm.conf
cat > "$conf" <<EOF
# Written by tools/slurm_local.sh for a throwaway single-node cluster; rewritten on every start.
ClusterName=trident-local
SlurmctldHost=localhost(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again (Slurm's default
# 120 s); shortened so that requeue demos do not stall.
AuthInfo=socket=$sock,cred_expire=$cred_expire
StateSaveLocation=$state/spool/ctld
SlurmdSpoolDir=$state/spool/d
SlurmctldPidFile=$state/run/slurmctld.pid
SlurmdPidFile=$state/run/slurmd.pid
SlurmctldLogFile=$state/log/slurmctld.log
SlurmdLogFile=$state/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
# Keep finished jobs visible to squeue/scontrol for 10 minutes (there is no accounting).
MinJobAge=600
# Quick turn-around for a single-node test cluster: run the scheduler every 2 s (default 60 s),
# so that a requeued job starts soon after its BeginTime (see cred_expire) instead of up to a
# minute later.
SchedulerParameters=sched_interval=2
SlurmdTimeout=60
InactiveLimit=0
KillWait=10
NodeName=localhost NodeAddr=127.0.0.1 CPUs=$cpus State=UNKNOWN
PartitionName=debug Nodes=localhost Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES PriorityTier=1
EOF
if [ -n "$preempt" ]; then
  cat >> "$conf" <<EOF
# SLURM_LOCAL_PREEMPT: jobs of "urgent" preempt jobs of "debug" that hold the CPUs they need.
PreemptType=preempt/partition_prio
PreemptMode=$preempt
PartitionName=urgent Nodes=localhost MaxTime=INFINITE State=UP OverSubscribe=NO PriorityTier=10
EOF
fi
chmod 0644 "$conf"
export SLURM_CONF="$conf"

# ---- slurmctld (-c: start from an empty job state), then slurmd for node "localhost"
# (the machine's host name is not "localhost", so slurmd must be told its node name).
slurmctld -c -f "$conf" || fail "slurmctld failed to start"
slurmd -N localhost -f "$conf" || fail "slurmd failed to start"

# ---- wait for the node to come up idle
t0=$(date +%s)
st=""
while :; do
  st="$(sinfo -h -N -n localhost -o '%T' 2>/dev/null | head -n1 || true)"
  case "$st" in
    idle|idle~|mixed|allocated) break ;;
  esac
  if [ $(( $(date +%s) - t0 )) -ge "$timeout_s" ]; then
    say "node state after ${timeout_s}s: '${st:-no answer from slurmctld}'"
    for d in munged slurmctld slurmd; do
      if pid_of "$d" >/dev/null; then say "$d running"; else say "$d NOT running"; fi
    done
    fail "the node did not become idle within ${timeout_s}s (SLURM_LOCAL_TIMEOUT)"
  fi
  sleep 0.5
done
for d in slurmctld slurmd; do
  pid_of "$d" >/dev/null || fail "$d of $state is not running although sinfo answers"
done
say "cluster up in $(( $(date +%s) - t0 ))s: node localhost is $st, $cpus CPUs, partition debug; state in $state"
say "clients need:"
echo "export SLURM_CONF=$conf"

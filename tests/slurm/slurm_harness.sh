#!/bin/bash
# slurm_harness.sh: a throw-away Slurm cluster on this one machine for gtrain's `slurm` tests:
# munge, slurmctld and two slurmd (node1, node2) from Debian's packages, 4 fake GPUs per node
# (symlinks to /dev/null), no systemd; no accounting, or with GTRAIN_SLURM_DBD=1 MariaDB and slurmdbd
# (sacct, QOS and account limits, GrpTRESMins quotas whose use is counted every minute). Starts in a
# few seconds (about 10 more with accounting).
#
# Needs root and: apt-get install -y --no-install-recommends slurmctld slurmd slurm-client munge
# (+ slurmdbd mariadb-server for GTRAIN_SLURM_DBD=1)
# Usage:  slurm_harness.sh start | stop | status
# Env:    GTRAIN_SLURM_DIR   all state (configs, spool, logs, munge socket); default ${TMPDIR:-/tmp}/gtrain-slurm
#         GTRAIN_SLURM_PORT  slurmctld port (default 7817); slurmd use the next ones
#         GTRAIN_SLURM_NODES=2  GTRAIN_SLURM_CPUS=2  GTRAIN_SLURM_GPUS=4 (per node)
#         GTRAIN_SLURM_MAX_GPUS_JOB=N  reject jobs asking for more than N GPUs (job_submit/lua)
#         GTRAIN_SLURM_DBD=1  accounting: slurmdbd on port+90, MariaDB on port+91; accounts gtrain
#                             (root's default, GrpTRESMins=gres/gpu=600) and team (gres/gpu=60); QOS
#                             normal (default, MaxWall 04:00:00) and gpu2 (MaxTRESPerJob=gres/gpu=2)
# Clients need SLURM_CONF=$GTRAIN_SLURM_DIR/etc/slurm.conf.
#
# Lessons (Slurm 22.05): gres File= must resolve to a character device; keep proctrack/linuxproc
# and task/none (cgroup device rules break /dev/null GPUs); slurmd ignores TERM while it cannot
# reach slurmctld, so stop jobs, then `scontrol shutdown`, then kill the recorded PIDs.
set -euo pipefail

D=${GTRAIN_SLURM_DIR:-${TMPDIR:-/tmp}/gtrain-slurm}
PORT=${GTRAIN_SLURM_PORT:-7817}
NODES=${GTRAIN_SLURM_NODES:-2}
CPUS=${GTRAIN_SLURM_CPUS:-2}
GPUS=${GTRAIN_SLURM_GPUS:-4}
MAXG=${GTRAIN_SLURM_MAX_GPUS_JOB:-}
DBD=${GTRAIN_SLURM_DBD:-0}
DBDPORT=$((PORT + 90)); DBPORT=$((PORT + 91))
H=$(hostname -s)
export SLURM_CONF=$D/etc/slurm.conf
MSOCK=$D/munge/munge.sock

write_configs() {
  mkdir -p "$D/etc" "$D/dev"
  local nodes="node[1-$NODES]"; [ "$NODES" -eq 1 ] && nodes=node1
  cat > "$D/etc/slurm.conf" <<EOF
ClusterName=gtraintest
SlurmctldHost=$H(127.0.0.1)
AuthType=auth/munge
AuthInfo=socket=$MSOCK,cred_expire=10
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
SlurmctldPort=$PORT
StateSaveLocation=$D/var/state
SlurmdSpoolDir=$D/var/spool/slurmd-%n
SlurmctldPidFile=$D/var/run/slurmctld.pid
SlurmdPidFile=$D/var/run/slurmd-%n.pid
SlurmctldLogFile=$D/var/log/slurmctld.log
SlurmdLogFile=$D/var/log/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=2
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdParameters=config_overrides
KillWait=10
MinJobAge=600
DependencyParameters=kill_invalid_depend
JobCompType=jobcomp/filetxt
JobCompLoc=$D/var/log/jobcomp.txt
EOF
  if [ "$DBD" = 1 ]; then
    # Usage against GrpTRESMins is counted by priority/multifactor every PriorityCalcPeriod (minutes),
    # never decayed nor reset here.
    cat >> "$D/etc/slurm.conf" <<EOF
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=localhost
AccountingStoragePort=$DBDPORT
AccountingStoragePass=$MSOCK
AccountingStorageEnforce=associations,limits,qos
AccountingStorageTRES=gres/gpu
JobAcctGatherType=jobacct_gather/linux
PriorityType=priority/multifactor
PriorityDecayHalfLife=0
PriorityUsageResetPeriod=NONE
PriorityCalcPeriod=1
EOF
    cat > "$D/etc/slurmdbd.conf" <<EOF
AuthType=auth/munge
AuthInfo=socket=$MSOCK
DbdHost=localhost
DbdPort=$DBDPORT
SlurmUser=root
LogFile=$D/var/log/slurmdbd.log
PidFile=$D/var/run/slurmdbd.pid
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$DBPORT
StorageUser=slurm
StoragePass=slurmpw
StorageLoc=gtrain_acct_db
EOF
    chmod 600 "$D/etc/slurmdbd.conf"  # slurmdbd refuses a world-readable file
  else
    printf 'AccountingStorageType=accounting_storage/none\nJobAcctGatherType=jobacct_gather/none\n' >> "$D/etc/slurm.conf"
  fi
  if [ -n "$MAXG" ]; then
    echo "JobSubmitPlugins=lua" >> "$D/etc/slurm.conf"
    write_job_submit_lua
  fi
  for i in $(seq 1 "$NODES"); do
    echo "NodeName=node$i NodeHostname=$H NodeAddr=127.0.0.1 Port=$((PORT + i)) CPUs=$CPUS Sockets=1" \
         "CoresPerSocket=$CPUS ThreadsPerCore=1 RealMemory=1000 Gres=gpu:$GPUS State=UNKNOWN" >> "$D/etc/slurm.conf"
  done
  echo "PartitionName=debug Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" >> "$D/etc/slurm.conf"
  for g in $(seq 0 $((GPUS - 1))); do ln -sfn /dev/null "$D/dev/fakegpu$g"; done
  cat > "$D/etc/gres.conf" <<EOF
AutoDetect=off
NodeName=$nodes Name=gpu File=$D/dev/fakegpu[0-$((GPUS - 1))]
EOF
  echo "CgroupPlugin=autodetect" > "$D/etc/cgroup.conf"
}

# Without slurmdbd only a job_submit/lua script can cap GPUs per job. 22.05 TRES strings look
# like "gres:gpu:2"; per-node and per-task counts are multiplied out.
write_job_submit_lua() {
  cat > "$D/etc/job_submit.lua" <<EOF
local MAX_GPUS = $MAXG
local function gpus(s)
  local n = 0
  if s == nil then return 0 end
  for seg in string.gmatch(s, "[^,]+") do
    if string.find(seg, "gpu") then n = n + (tonumber(string.match(seg, "(%d+)\$")) or 1) end
  end
  return n
end
local function count(v)
  if v == nil or v <= 0 or v >= 4294967294 then return 1 end
  return v
end
function slurm_job_submit(job_desc, part_list, submit_uid)
  local mult = { tres_per_job = 1, tres_per_socket = 1,
                 tres_per_node = count(job_desc.min_nodes), tres_per_task = count(job_desc.num_tasks) }
  for f, m in pairs(mult) do
    local n = gpus(job_desc[f]) * m
    if n > MAX_GPUS then
      slurm.log_user("max %d GPUs per job (%s=%s)", MAX_GPUS, f, job_desc[f])
      return slurm.ERROR
    end
  end
  return slurm.SUCCESS
end
function slurm_job_modify(job_desc, job_rec, part_list, modify_uid)
  return slurm.SUCCESS
end
return slurm.SUCCESS
EOF
}

wait_for() {  # wait_for SECONDS CMD...
  local deadline=$((SECONDS + $1)); shift
  until "$@" >/dev/null 2>&1; do [ $SECONDS -ge $deadline ] && return 1; sleep 0.1; done
}

# MariaDB (its own data directory and socket) and slurmdbd, a fresh database each start.
start_db() {
  local sock=$D/db/mysqld.sock
  rm -rf "$D/db"; mkdir -p "$D/db"
  mariadb-install-db --datadir="$D/db/data" --user=root --auth-root-authentication-method=socket \
    --skip-test-db > "$D/db/install.log" 2>&1 || { echo "mariadb-install-db failed" >&2; tail "$D/db/install.log" >&2; exit 1; }
  mariadbd --datadir="$D/db/data" --user=root --socket="$sock" --port=$DBPORT --bind-address=127.0.0.1 \
    --pid-file="$D/db/mysqld.pid" --log-error="$D/db/mysqld.err" --innodb-buffer-pool-size=32M >/dev/null 2>&1 &
  wait_for 30 mariadb -S "$sock" -e 'select 1' || { echo "mariadb failed" >&2; tail "$D/db/mysqld.err" >&2; exit 1; }
  mariadb -S "$sock" -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY 'slurmpw';
    GRANT ALL ON gtrain_acct_db.* TO 'slurm'@'127.0.0.1';"
  slurmdbd
  wait_for 30 sacctmgr -n show cluster || { echo "slurmdbd failed" >&2; tail "$D/var/log/slurmdbd.log" >&2; exit 1; }
  sacctmgr -n show cluster format=cluster | grep -qw gtraintest || sacctmgr -i add cluster gtraintest >/dev/null
}

# After slurmctld registered (gres/gpu exists as a TRES only then).
setup_accounts() {
  sacctmgr -i add account gtrain Description=gtrain Organization=gtrain >/dev/null
  sacctmgr -i add account team Description=team Organization=team >/dev/null
  sacctmgr -i modify account gtrain set GrpTRESMins=gres/gpu=600 >/dev/null
  sacctmgr -i modify account team set GrpTRESMins=gres/gpu=60 >/dev/null
  sacctmgr -i add qos gpu2 MaxTRESPerJob=gres/gpu=2 Flags=DenyOnLimit >/dev/null
  sacctmgr -i modify qos normal set MaxWall=04:00:00 >/dev/null
  sacctmgr -i add user root Account=gtrain DefaultAccount=gtrain >/dev/null
  sacctmgr -i add user root Account=team >/dev/null
  sacctmgr -i modify user root set QOS=normal,gpu2 DefaultQOS=normal >/dev/null
}

start() {
  if [ "$DBD" = 1 ]; then
    for p in slurmdbd mariadbd mariadb-install-db; do
      # Exit 77: ctest counts the accounting suite as skipped (its tests say so too).
      command -v $p >/dev/null || { echo "slurm_harness: $p missing (apt-get install slurmdbd mariadb-server)" >&2; exit 77; }
    done
  fi
  for p in slurmctld slurmd munged sbatch; do
    command -v $p >/dev/null || { echo "slurm_harness: $p missing (apt-get install slurmctld slurmd slurm-client munge)" >&2; exit 1; }
  done
  mkdir -p "$D"/var/{state,spool,log,run} "$D/munge"
  chmod 755 "$D" "$D/munge"                          # munged insists its socket dir is o+x
  [ -s "$D/munge/munge.key" ] || mungekey --create --keyfile="$D/munge/munge.key"
  chmod 600 "$D/munge/munge.key"
  if ! munge -n -S "$MSOCK" >/dev/null 2>&1; then
    munged --key-file="$D/munge/munge.key" --socket="$MSOCK" --pid-file="$D/munge/munged.pid" \
           --log-file="$D/munge/munged.log" --seed-file="$D/munge/seed"
  fi
  write_configs
  [ "$DBD" = 1 ] && start_db
  for i in $(seq 1 "$NODES"); do mkdir -p "$D/var/spool/slurmd-node$i"; done
  slurmctld -i
  wait_for 10 scontrol ping || { echo "slurmctld failed:" >&2; tail -5 "$D/var/log/slurmctld.log" >&2; exit 1; }
  for i in $(seq 1 "$NODES"); do slurmd -N "node$i"; done
  local deadline=$((SECONDS + 30))
  until [ "$(sinfo -h -t idle -o '%D' 2>/dev/null | head -1)" = "$NODES" ]; do
    if [ $SECONDS -ge $deadline ]; then
      echo "nodes not idle:" >&2; sinfo -N -o '%N %T %E' >&2; tail -5 "$D"/var/log/slurmd-*.log >&2; exit 1
    fi
    sleep 0.1
  done
  [ "$DBD" = 1 ] && setup_accounts
  echo "slurm_harness: up; export SLURM_CONF=$SLURM_CONF"
}

pids_of() { local f; for f in "$@"; do [ -f "$f" ] && cat "$f"; done; true; }

kill_pids() {  # TERM, wait up to 10 s, then KILL; only PIDs this harness's daemons recorded
  local p
  [ $# -eq 0 ] && return 0
  kill "$@" 2>/dev/null || true
  for _ in $(seq 1 100); do
    local alive=0
    for p in "$@"; do kill -0 "$p" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && return 0; sleep 0.1
  done
  for p in "$@"; do kill -9 "$p" 2>/dev/null || true; done
}

stop() {
  [ -f "$SLURM_CONF" ] || return 0
  local slurm_pids; slurm_pids=$(pids_of "$D"/var/run/slurmctld.pid "$D"/var/run/slurmd-*.pid)
  local jobs; jobs=$(squeue -h -o %A 2>/dev/null || true)
  if [ -n "$jobs" ]; then                             # slurmstepd outlives slurmd: jobs first
    scancel $jobs 2>/dev/null || true
    for _ in $(seq 1 150); do [ -z "$(squeue -h -t R,CG,S -o %A 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  [ -n "$slurm_pids" ] && { scontrol shutdown >/dev/null 2>&1 || true; }
  kill_pids $slurm_pids
  kill_pids $(pids_of "$D"/var/run/slurmdbd.pid)
  kill_pids $(pids_of "$D"/db/mysqld.pid)
  kill_pids $(pids_of "$D/munge/munged.pid")
  rm -f "$D"/var/run/*.pid
  rm -rf "$D/var/state" "$D/var/spool"
  echo "slurm_harness: stopped"
}

case "${1:-}" in
  start) start ;;
  stop) stop ;;
  status) sinfo -N -o '%N %T %G %c %E'; squeue ;;
  *) echo "usage: $0 start|stop|status" >&2; exit 2 ;;
esac

# shellcheck shell=bash disable=SC2034
# Site settings: JUWELS Booster (JSC), 4x A100 40 GB per node, InfiniBand HDR200.
# Sourced by hpc/launch.sh; override any value through the environment.
WG_TIME_CAP=${WG_TIME_CAP:-1440}          # booster partition: 24 h
WG_ACCOUNT=${WG_ACCOUNT:-}                # your compute project, e.g. hclimrep
WG_PARTITION=${WG_PARTITION:-booster}     # develbooster: 2 h cap (WG_TIME_CAP=120)
WG_SBATCH_EXTRA=()
WG_MODULES=(Stages/2024 GCC OpenMPI CUDA NCCL)
# The IB interfaces carry NCCL traffic; JSC recommends these for multi-node runs.
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-ib0}
export NCCL_IB_TIMEOUT=${NCCL_IB_TIMEOUT:-50}
export UCX_TLS=${UCX_TLS:-rc_x,self,sm}
export UCX_RC_TIMEOUT=${UCX_RC_TIMEOUT:-10s}
# Slurm >= 22.05 no longer hands sbatch's -c to srun: pass the CPU count per
# task on (launch.sh also gives its srun --cpus-per-task; this covers any other
# srun in the job).
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-}
[[ -n $SRUN_CPUS_PER_TASK ]] || unset SRUN_CPUS_PER_TASK

# shellcheck shell=bash disable=SC2034
# Site settings: Levante GPU partition (DKRZ), 4x A100 per node.
# Sourced by hpc/launch.sh; override any value through the environment.
WG_TIME_CAP=${WG_TIME_CAP:-720}           # gpu partition: 12 h
WG_ACCOUNT=${WG_ACCOUNT:-}                # your project, e.g. bk1234
WG_PARTITION=${WG_PARTITION:-gpu}
WG_SBATCH_EXTRA=(--exclusive)
WG_MODULES=(gcc openmpi)
export NCCL_SOCKET_IFNAME=${NCCL_SOCKET_IFNAME:-ib0}
export UCX_TLS=${UCX_TLS:-rc,sm,self}
export OMPI_MCA_pml=${OMPI_MCA_pml:-ucx}
# Slurm >= 22.05 no longer hands sbatch's -c to srun: pass the CPU count per
# task on (launch.sh also gives its srun --cpus-per-task; this covers any other
# srun in the job).
export SRUN_CPUS_PER_TASK=${SLURM_CPUS_PER_TASK:-}
[[ -n $SRUN_CPUS_PER_TASK ]] || unset SRUN_CPUS_PER_TASK

# shellcheck shell=bash disable=SC2034
# Site settings: default (any cluster without its own file; also the test cluster).
# Sourced by hpc/launch.sh. Every variable is optional.
WG_TIME_CAP=${WG_TIME_CAP:-1440}      # longest --time in minutes this site accepts
WG_ACCOUNT=${WG_ACCOUNT:-}            # sbatch --account default
WG_PARTITION=${WG_PARTITION:-}        # sbatch --partition default
WG_SBATCH_EXTRA=()                    # more sbatch options when submitting from a login node
WG_MODULES=()                         # `module load` these inside the job
# Network variables for NCCL/UCX go here as exports, e.g.
# export NCCL_SOCKET_IFNAME=ib0

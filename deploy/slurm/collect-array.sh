#!/usr/bin/env bash
# One collection job as a Slurm array: task I of N runs shard I of the job's episodes.
#   sbatch deploy/slurm/collect-array.sh                 # the defaults below
#   JOB=examples/jobs/web.yaml STORE=/shared/store sbatch --array=0-15 deploy/slurm/collect-array.sh
# The store must be on a file system every node mounts. A failed task can be resubmitted
# alone (sbatch --array=5 ...): it collects only what its shard still misses.
# In the project image (`make image`, pushed to a registry) through Apptainer:
#   TRAJFORGE="apptainer exec --bind /shared docker://REGISTRY/trajforge:latest trajforge" sbatch deploy/slurm/collect-array.sh
#SBATCH --job-name=trajforge-collect
#SBATCH --array=0-7
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --output=trajforge-collect-%A-%a.log
set -euo pipefail
: "${SLURM_ARRAY_TASK_ID:?run under sbatch --array (or set SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT)}"
JOB=${JOB:-examples/jobs/terminal-swe.yaml}
STORE=${STORE:-/shared/trajforge-store}
TRAJFORGE=${TRAJFORGE:-trajforge}
# shellcheck disable=SC2086  # TRAJFORGE may be a command with arguments (python -m trajforge)
exec $TRAJFORGE collect "$JOB" --store "$STORE" --shard "$SLURM_ARRAY_TASK_ID" --num-shards "${SLURM_ARRAY_TASK_COUNT:-8}"

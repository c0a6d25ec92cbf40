#!/usr/bin/env bash
# One collection job as a Slurm array: task I of N runs shard I of the job's episodes.
#   sbatch deploy/slurm/collect-array.sh                 # the defaults below: 8 shards
#   JOB=examples/jobs/web.yaml STORE=/shared/store sbatch --array=0-15 deploy/slurm/collect-array.sh
# N is the size of a whole array 0..N-1 (2 or more tasks), or NUM_SHARDS. A resubmission
# names fewer tasks, so it must set NUM_SHARDS (the split by hash depends on N):
#   NUM_SHARDS=16 sbatch --array=5 deploy/slurm/collect-array.sh
# collects only what shard 5 of 16 still misses (a cancelled, failed or timed-out task).
# The store must be on a file system every node mounts. Relative paths (JOB, STORE, the
# log) are taken from the folder sbatch was run in; `sbatch --chdir DIR` names another.
# In the project image (`make image`, pushed to a registry) through Apptainer:
#   TRAJFORGE="apptainer exec --bind /shared docker://REGISTRY/trajforge:latest trajforge" sbatch deploy/slurm/collect-array.sh
#SBATCH --job-name=trajforge-collect
#SBATCH --array=0-7
#SBATCH --cpus-per-task=2
#SBATCH --mem=4G
#SBATCH --output=trajforge-collect-%A-%a.log
set -euo pipefail
: "${SLURM_ARRAY_TASK_ID:?run under sbatch --array (or set SLURM_ARRAY_TASK_ID and NUM_SHARDS)}"
if [ -z "${NUM_SHARDS:-}" ]; then
  # a whole array 0..N-1 (N > 1) is N shards. SLURM_ARRAY_TASK_COUNT is the size of this
  # submission, not the job's: 1 for a resubmitted task (--array=5, and --array=0 would look
  # whole), so anything else must say N. (Slurm before 17.02 sets no count: always say N.)
  if [ "${SLURM_ARRAY_TASK_MIN:-}" = 0 ] && [ "${SLURM_ARRAY_TASK_COUNT:-0}" -gt 1 ] &&
     [ "$SLURM_ARRAY_TASK_COUNT" = $((SLURM_ARRAY_TASK_MAX + 1)) ]; then
    NUM_SHARDS=$SLURM_ARRAY_TASK_COUNT
  else
    echo "array task $SLURM_ARRAY_TASK_ID: this submission (${SLURM_ARRAY_TASK_MIN:-?}-${SLURM_ARRAY_TASK_MAX:-?}," \
      "${SLURM_ARRAY_TASK_COUNT:-?} tasks) is not a whole array 0..N-1 of 2 or more, so the job's shard count" \
      "is unknown: set NUM_SHARDS (NUM_SHARDS=8 sbatch --array=5 ...)" >&2
    exit 2
  fi
fi
JOB=${JOB:-examples/jobs/terminal-swe.yaml}
STORE=${STORE:-/shared/trajforge-store}
TRAJFORGE=${TRAJFORGE:-trajforge}
# shellcheck disable=SC2086  # TRAJFORGE may be a command with arguments (python -m trajforge)
exec $TRAJFORGE collect "$JOB" --store "$STORE" --shard "$SLURM_ARRAY_TASK_ID" --num-shards "$NUM_SHARDS"

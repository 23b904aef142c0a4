#!/usr/bin/env bash
# A/B of two versions of the kernels on one GPU, in one device call: python -m
# experiments.probes.kernels N (each kernel's GPU time in a B = 32, D = 64 training step,
# torch.profiler; or the probe AB_PROBE names, e.g. AB_PROBE=memory: a step's peak memory)
# under the other version's sdtw/ and under this tree's, alternating, ROUNDS times each
# (default 2), so that both versions see the same machine and clocks.  Only the sdtw package
# comes from OLD_TREE; the probes and the rest are this tree's (the probe must still run
# against the old package's API: experiments.probes.kernels and memory use only sdtw.softdtw
# and sdtw.cuda.set_graphs; tc_rule needs sdtw.cuda.config.overrides).
# Usage: bash experiments/ab.sh OLD_TREE N [N ...]
#   OLD_TREE: a folder holding the other version's sdtw/, e.g.
#     mkdir -p _ab && git archive <commit> sdtw | tar -x -C _ab
#   (an untracked folder that git does not ignore travels with the tree to the device).
# Prints the DP and park kernels' and the whole step's lines, tagged "A" (OLD_TREE) and "B" (this
# tree).
# Extra environment (SDTW_CUDA_GRAPHS=0, SDTW_FAST_LAUNCH=0, ...) applies to both;
# AB_ENV_A / AB_ENV_B (VAR=VALUE ...) to one side only, so that one tree can be compared with
# itself under a switch: AB_ENV_B=SDTW_TC_GRADS=0 bash experiments/ab.sh . 512 2048;
# AB_FLAGS adds probe flags (AB_FLAGS=--float64: float64 inputs); AB_GREP replaces the pattern
# of the lines printed (AB_PROBE=memory AB_GREP=peak: that probe's lines).
set -uo pipefail
old=${1:?usage: ab.sh OLD_TREE N [N ...]}
shift
[ $# -ge 1 ] || { echo "usage: ab.sh OLD_TREE N [N ...]" >&2; exit 2; }
[ -d "$old/sdtw" ] || { echo "ab.sh: $old has no sdtw/ package" >&2; exit 2; }
export PYTHONUNBUFFERED=1
# Side A runs in a folder of links to this tree's top-level entries but with OLD_TREE's sdtw/
# (python -m puts the working folder first on sys.path, ahead of PYTHONPATH).
old=$(cd "$old" && pwd)
here=$(pwd)
side_a=$(mktemp -d)
for f in "$here"/*; do
    [ "$(basename "$f")" = sdtw ] || ln -s "$f" "$side_a/"
done
ln -s "$old/sdtw" "$side_a/sdtw"
log=$(mktemp)
status=0
for n in "$@"; do
    for round in $(seq "${ROUNDS:-2}"); do
        for side in A B; do
            if [ "$side" = A ]; then
                dir=$side_a side_env=${AB_ENV_A:-}
            else
                dir=$here side_env=${AB_ENV_B:-}
            fi
            # shellcheck disable=SC2086
            (cd "$dir" && env $side_env PYTHONPATH=. python3 -m \
                "experiments.probes.${AB_PROBE:-kernels}" "$n" ${AB_FLAGS:-}) \
                > "$log" 2>&1 ||
                { status=1; tail -2 "$log" | sed "s/^/$side round $round: /"; }
            grep -E "${AB_GREP:-^B=.*(forward|backward|park|all kernels)}" "$log" |
                sed -e "s/^/$side round $round: /"
        done
    done
done
rm -rf "$side_a" "$log"
exit "$status"

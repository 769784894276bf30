#!/bin/bash
# Runs `weir bench` configurations interleaved, N rounds, and prints each
# one's events/s per run and the median: this machine's speed swings by up
# to 2x between runs, so configurations are only compared within one call.
#
# usage: bench/interleaved.sh ROUNDS "label|ENV=value|weir binary|bench args" ...
# e.g.   bench/interleaved.sh 3 \
#          "p1|X=1|target/release/weir|--scenario keyed-session --rows 4000000 --parallelism 1" \
#          "p2|X=1|target/release/weir|--scenario keyed-session --rows 4000000 --parallelism 2"
set -euo pipefail
rounds=$1
shift
declare -A results
for _ in $(seq "$rounds"); do
  for configuration in "$@"; do
    IFS='|' read -r label environment binary arguments <<< "$configuration"
    # shellcheck disable=SC2086
    rate=$(env $environment "$binary" bench $arguments 2>&1 | tail -1 | awk '{print $5}')
    results[$label]="${results[$label]:-} $rate"
  done
done
for configuration in "$@"; do
  IFS='|' read -r label _ <<< "$configuration"
  median=$(echo ${results[$label]} | tr ' ' '\n' | sort -n | awk '{v[NR]=$1} END {print v[int((NR+1)/2)]}')
  echo "$label:${results[$label]} median $median"
done

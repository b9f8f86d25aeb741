#!/bin/bash
# The two steps around tools/device_call.sh on this machine (docs/gpu.md, session 27):
#   bash tools/device_tree.sh slim NAME [REF]   .devtree/slim/NAME: REF's (default HEAD)
#       microgpt, kernels, tools, tests, pyproject.toml, setup.cfg and the bench folders'
#       scripts (*.py *.sh *.txt *.json: not their results, for the carry's 64 MiB), with
#       commit.txt, for a job .devtree/jobs/NAME to run from
#   bash tools/device_tree.sh unpack CALL FILES_AT   the call's all.tgz into
#       .devtree/results/CALL/ (and CALL.done), its kernel caches into .devtree/cache/ for
#       the next call's carry; prints the call's summary
set -e
case $1 in
slim)
  name=$2; ref=${3:-HEAD}; d=.devtree/slim/$name
  rm -rf "$d"; mkdir -p "$d"
  git archive "$ref" microgpt kernels tools tests pyproject.toml setup.cfg | tar -C "$d" -xf -
  git archive "$ref" bench | tar -C "$d" -xf - --wildcards '*.py' '*.sh' '*.txt' '*.json'
  git rev-parse "$ref" > "$d/commit.txt"; du -sh "$d" ;;
unpack)
  call=$2; at=$3; d=.devtree/results/$call
  mkdir -p "$d" .devtree/cache; tar -C "$d" -xzf "$at/all.tgz"
  if ls "$at"/cache.txz.* > /dev/null 2>&1; then
    rm -f .devtree/cache/cache.txz.*; cp "$at"/cache.txz.* .devtree/cache/
  fi
  touch "$d.done"; cat "$d/summary.log" ;;
*)
  echo "usage: bash tools/device_tree.sh slim NAME [REF] | unpack CALL FILES_AT" >&2; exit 2 ;;
esac

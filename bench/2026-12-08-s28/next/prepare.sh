#!/bin/bash
# The next session's first call, made ready on this machine from the repository root
# (after `python3 -m venv /tmp/venv && /tmp/venv/bin/pip install -q -e ".[test]"`):
# the b2 branch from its mailbox, the jobs' slim trees, the jobs, the token shards. Then
# `run` with carry [".whl", ".devtree/jobs", ".devtree/data.txz", ".devtree/slim"] (and
# ".devtree/cache" once a call has returned one) and the command
#   <the wheels' install prefix> LIMIT=545 TEST_S=200 bash tools/device_call.sh "b2 steps mem"
# and, on the warm machine, the same with LIMIT=360 ... "xl".
set -e
HERE=bench/2026-12-08-s28; B2=bench/2026-12-07-s27/b2/b2.mbox
# the b2 branch made again from this HEAD each time (one made earlier would miss what landed since)
git branch -f s28-b2 HEAD
wt=$(mktemp -d); git worktree add -q "$wt" s28-b2
(cd "$wt" && git am -q "$OLDPWD/$B2"); git worktree remove --force "$wt"
bash tools/device_tree.sh slim b2 s28-b2
for job in steps mem xl; do bash tools/device_tree.sh slim $job HEAD; done
mkdir -p .devtree/jobs; cp -r $HERE/next/jobs/* .devtree/jobs/
[ -f .devtree/data.txz ] || PATH=/tmp/venv/bin:$PATH bash bench/2026-12-06-s26/lead/make_shards.sh \
  "$(mktemp -d)/data" .devtree/data.txz > /dev/null
du -sh .devtree/slim .devtree/jobs .devtree/data.txz

#!/usr/bin/env bash
# Wait up to $1 s (or until all-done), then bring back /tmp/r (logs + small result files) as one tarball.
R=/tmp/r; end=$(( $(date +%s) + ${1:-500} ))
while [ $(date +%s) -lt $end ] && [ ! -f $R/all-done.txt ]; do sleep 10; done
cat $R/phase1.txt $R/phases.txt 2>/dev/null; for f in $R/fp16-state-docparse150.log $R/cline-recipe.log $R/cline-recipe-graphs.log $R/gpu-*.log $R/longgen-*.log $R/ablate-*.log; do [ -f $f ] && { echo "== $f"; tail -n 4 $f; }; done
tar czf $OUT/r.tgz --exclude='*/logs/*' -C /tmp r 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp r 2>/dev/null; ls -la $OUT

#!/usr/bin/env bash
# Wait up to $1 s (or until all-done), print the summary and the live tail, bring /tmp/r back as one tarball.
R=/tmp/r; end=$(( $(date +%s) + ${1:-300} ))
while [ $(date +%s) -lt $end ] && [ ! -f $R/all-done.txt ]; do sleep 10; done
cat $R/summary.txt 2>/dev/null; for f in $R/stability.log $R/gpu-tests.log $R/session.log; do [ -f $f ] && { echo "== $f"; tail -n 6 $f; }; done
tar czf $OUT/r.tgz --exclude='*/logs/*' -C /tmp r 2>/dev/null; tar czf $OUT/logs.tgz -C /tmp r 2>/dev/null; ls -la $OUT

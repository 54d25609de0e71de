"""Re-cut the GPU kit's wheel groups (../shared/tools/gpu/fetch.sh writes .whl-gpu/gNN of <= 45 MiB) into
carry folders .whl-gpu/cNN of <= --cap MiB, because a device call carries at most 64 MiB *including* the
checkout (26.9 MiB since the chat checkpoint landed), so a 45 MiB group no longer travels.

Usage (CPU machine, checkout root, after fetch.sh):  python3 benchmarks/gpu_kit_recut.py [--cap 34]
Device, one call per folder:  mkdir -p /tmp/whl/c && cp .whl-gpu/cNN/* /tmp/whl/c/
Device, last call (carry .whl-gpu/INSTALL.sh, tput.py, join.sh): bash .whl-gpu/join.sh && bash .whl-gpu/INSTALL.sh
Every file becomes <group>__<name>.chunkNNN (a zero-length file one empty .chunk000, so join.sh recreates it);
join.sh concatenates the chunks back into .whl-gpu/<group>/<name> and checks each file's sha256 against
MANIFEST-recut.txt.
"""
import argparse
import hashlib
import os
import shutil
import sys

JOIN = '''#!/usr/bin/env bash
# Join /tmp/whl/c/<group>__<name>.chunkNNN back into .whl-gpu/<group>/<name>; check sha256s.
set -euo pipefail
cd "$(dirname "$0")"
for f in /tmp/whl/c/*.chunk000; do
  b=$(basename "$f" .chunk000); g=${b%%__*}; n=${b#*__}; mkdir -p "$g"
  cat /tmp/whl/c/"$b".chunk* > "$g/$n"
done
sha256sum -c --quiet MANIFEST-recut.txt && echo "join.sh: $(wc -l < MANIFEST-recut.txt) files joined, sha256 ok"
'''


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument('--cap', type=float, default=34.0, help='MiB per carry folder')
    a = ap.parse_args(argv)
    W = '.whl-gpu'
    cap = int(a.cap * 2**20)
    for d in os.listdir(W):
        if d.startswith('c') and d[1:].isdigit():
            shutil.rmtree(os.path.join(W, d))
    sums, folders, cur, room = [], [], [], cap   # one byte stream cut into cap-sized folders
    for g in sorted(d for d in os.listdir(W) if d.startswith('g') and d[1:].isdigit()):
        for f in sorted(os.listdir(os.path.join(W, g))):
            with open(os.path.join(W, g, f), 'rb') as fh:
                data = fh.read()
            sums.append('%s  %s/%s' % (hashlib.sha256(data).hexdigest(), g, f))
            if not data:  # no bytes, still one chunk: join.sh recreates a file from its .chunk000
                cur.append(('%s__%s.chunk000' % (g, f), b''))
            off, k = 0, 0
            while off < len(data):
                take = min(room, len(data) - off)
                cur.append(('%s__%s.chunk%03d' % (g, f, k), data[off:off + take]))
                off, k, room = off + take, k + 1, room - take
                if room == 0:
                    folders.append(cur)
                    cur, room = [], cap
    if cur:
        folders.append(cur)
    for i, fl in enumerate(folders, 1):
        d = os.path.join(W, 'c%02d' % i)
        os.makedirs(d)
        for name, blob in fl:
            with open(os.path.join(d, name), 'wb') as fh:
                fh.write(blob)
        print('c%02d %5.1f MiB %3d pieces' % (i, sum(len(b) for _, b in fl) / 2**20, len(fl)))
    with open(os.path.join(W, 'MANIFEST-recut.txt'), 'w') as fh:
        fh.write('\n'.join(sums) + '\n')
    with open(os.path.join(W, 'join.sh'), 'w') as fh:
        fh.write(JOIN)
    print('%d folders; tree + one folder must stay under 64 MiB' % len(folders))
    return 0


if __name__ == '__main__':
    sys.exit(main())

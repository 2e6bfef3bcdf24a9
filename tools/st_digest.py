#!/usr/bin/env python3
"""st_digest.py FILE...: for each safetensors file, the sha256 of its tensors
(names, dtypes, shapes and bytes, in name order) apart from the header's
__metadata__, and the metadata itself (sorted keys, one a line, values as
JSON strings), so that two runs can be compared tensor for tensor while
their metadata differs (tools/golden_runs.sh). Standard library only."""
import hashlib
import json
import struct
import sys


def digest(path):
    with open(path, 'rb') as f:
        raw = f.read()
    n = struct.unpack('<Q', raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop('__metadata__', {})
    base = 8 + n
    h = hashlib.sha256()
    for name in sorted(header):
        t = header[name]
        lo, hi = t['data_offsets']
        h.update(json.dumps([name, t['dtype'], t['shape']]).encode())
        h.update(raw[base + lo:base + hi])
    return h.hexdigest(), meta


for p in sys.argv[1:]:
    try:
        d, meta = digest(p)
    except Exception as e:  # a truncated or foreign file: say so, go on
        print('%s: not readable as safetensors (%s)' % (p, type(e).__name__))
        continue
    print('%s tensors %s' % (p, d))
    for k in sorted(meta):
        print('%s meta %s=%s' % (p, k, json.dumps(meta[k])))

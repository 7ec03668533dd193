#!/usr/bin/env python3
"""Writes the seed corpus of fuzz_pickle into fuzz/corpus/pickle/.

    python3 fuzz/seed_pickle_corpus.py

Standard library only. Small inputs that between them reach every opcode the
reader accepts (protocols 2 to 5, memo sharing, text forms) and every refusal,
plus a one-step snapshot from tools/gen_snapshot_fixtures.py. Crash
reproducers found later are added to the same directory by hand (named
crash-*), so do not clear it when rerunning this script.
"""
import os
import pickle
import struct
import sys

sys.dont_write_bytecode = True  # keep tools/ free of __pycache__

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), 'tools'))
import gen_snapshot_fixtures as gen  # noqa: E402


def small_snapshot():
    gen.FRAME_POOL.clear()
    a = gen.Allocator(80 * gen.GiB)
    a.recording = True
    w = a.malloc(3 * gen.MiB, gen.STREAM_MAIN, 'param')
    x = a.malloc(1000, gen.STREAM_MAIN, 'act')
    c = a.malloc(2 * gen.MiB, gen.STREAM_COMM, 'comm')
    a.free(x)
    a.free(c, other_stream_used=True)
    a.event_done(c)
    a.malloc(700, gen.STREAM_MAIN, 'act')
    a.release_cached()
    del w
    return {'segments': a.snapshot_segments(), 'device_traces': [a.trace],
            'allocator_settings': gen.settings(False), 'external_annotations': []}


def main():
    out = os.path.join(HERE, 'corpus', 'pickle')
    os.makedirs(out, exist_ok=True)
    shared = ['frame']
    values = {
        'ints': [0, 1, -1, 255, 256, 65535, 65536, -2**31, 2**31 - 1, 2**31, 2**40 + 7,
                 -2**63, 2**63 - 1, 140586292084736],
        'floats': [0.0, -1.5, 1e300, float('inf')],
        'strs': ['', 'a', 'segment_type', 'é∂', '\U0001F600', 'x' * 300],
        'bytes': [b'', b'\x00\xff', b'y' * 300],
        'tuples': [(), (1,), (1, 2), (1, 2, 3), (1, 2, 3, 4)],
        'consts': [None, True, False],
        'nested': {'k': [{'a': (0, 0)}, [[[]]]], 7: 'int key', (1, 2): 'tuple key'},
        'shared': [shared, shared, {'s': shared}],
    }
    seeds = {}
    for proto in (2, 3, 4, 5):
        seeds['values_p%d' % proto] = pickle.dumps(values, protocol=proto)
        seeds['snapshot_p%d' % proto] = pickle.dumps(small_snapshot(), protocol=proto)
    seeds['bytearray_p5'] = pickle.dumps([bytearray(b'abc'), bytearray()], protocol=5)
    seeds['big_list_p4'] = pickle.dumps(list(range(1500)), protocol=4)     # two APPENDS batches
    seeds['big_dict_p4'] = pickle.dumps({i: i for i in range(1100)}, protocol=4)
    seeds['binstring'] = b'\x80\x02U\x02hiT\x03\x00\x00\x00abc\x86.'
    seeds['long4'] = b'\x80\x02\x8b\x09\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\x7f\x00.'
    seeds['text_forms'] = b'\x80\x02(I42\nI01\nL-7L\nF0.25\np0\ng0\nl.'
    seeds['text_dict'] = b'(S\'k\'\nI1\nd.'  # STRING is refused
    seeds['pop_dup'] = b'\x80\x02K\x01(K\x021K\x020N2\x86.'
    seeds['memo_forms'] = b'\x80\x02(K\x01q\x03K\x02r\x05\x00\x00\x00h\x03j\x05\x00\x00\x00t.'
    seeds['frame_p4'] = b'\x80\x04\x95\x05\x00\x00\x00\x00\x00\x00\x00]\x94h\x00\x85.'
    seeds['global_reduce'] = b'\x80\x02cbuiltins\nprint\nX\x02\x00\x00\x00hi\x85R.'
    seeds['stack_global'] = b'\x80\x04\x8c\x08builtins\x94\x8c\x05print\x94\x93\x94)R\x94.'
    seeds['set_p4'] = pickle.dumps({1, 2, frozenset([3])}, protocol=4)
    seeds['recursive'] = b'\x80\x02]q\x00h\x00a.'
    seeds['deep'] = b'\x80\x02' + b']' * 70 + b'a' * 69 + b'.'
    seeds['truncated'] = pickle.dumps(values, protocol=2)[:200]
    seeds['absurd_length'] = b'\x80\x04\x8d' + struct.pack('<Q', 1 << 62) + b'abc.'
    for name, data in seeds.items():
        with open(os.path.join(out, name + '.pickle'), 'wb') as f:
            f.write(data)
    print('wrote %d seeds to %s (largest %d bytes)' % (len(seeds), out,
                                                     max(len(d) for d in seeds.values())))


if __name__ == '__main__':
    main()

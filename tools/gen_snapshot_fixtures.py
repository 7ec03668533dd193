#!/usr/bin/env python3
"""Writes small PyTorch-memory-snapshot-shaped pickles for the tests.

    python3 tools/gen_snapshot_fixtures.py [OUT_DIR]   (default tests/fixtures/snapshots)

Standard library only (no torch). The files are shaped like the output of
torch.cuda.memory._dump_snapshot (top level: segments, device_traces,
allocator_settings, external_annotations) and are internally consistent: a
small model of PyTorch's CUDA caching allocator (c10/cuda/CUDACachingAllocator
.cpp, as summarised in shared/notes/pytorch-allocator.md) places every block,
so addresses, splits, merges and segment events follow its rules:

  - requests round up to 512 bytes; <= 1 MiB goes to the small pool, which
    takes 2 MiB segments; larger requests take 20 MiB segments below 10 MiB and
    segments rounded up to 2 MiB from 10 MiB on;
  - best fit among free blocks of the same stream and pool (size, then
    address); the allocated part is the low end, the remainder stays free when
    it is >= 512 B (small) or > 1 MiB (large), else it stays inside the block as
    unsplit slack;
  - frees merge with free neighbours in the same segment; a block used by a
    second stream (record_stream) is free_requested at once and
    free_completed later;
  - empty_cache releases every segment that is one free block (segment_free);
    a failed segment allocation releases the cache and retries, then records
    an 'oom' entry;
  - with expandable_segments:True, one segment per (stream, pool) reserves a
    large address range and pages (2 MiB small, 20 MiB large) are mapped at the
    end on demand (segment_map) and unmapped on release (segment_unmap); the
    snapshot reports each contiguous mapped range as a segment.

Recording starts mid-run, as in real snapshots: weights and a few buffers are
allocated before it, so some frees have no matching alloc and some live blocks
at the end were never allocated in the trace.

Each variant is written with protocols 2, 4 and 5 where the tests compare
them; EXPECTED lists a digest of the decoded tree of every good file (the C
reader's tree must hash the same), and bad/ holds malformed inputs.
"""
import os
import pickle
import struct
import sys

KiB = 1024
MiB = 1024 * KiB
GiB = 1024 * MiB

K_MIN_BLOCK = 512
K_SMALL_SIZE = 1 * MiB
K_SMALL_BUFFER = 2 * MiB
K_LARGE_BUFFER = 20 * MiB
K_MIN_LARGE_ALLOC = 10 * MiB
K_ROUND_LARGE = 2 * MiB

STREAM_MAIN = 0
STREAM_COMM = 0x55D1C2A3F0E0  # PyTorch records cudaStream_t values as ints


def round_size(size):
    if size < K_MIN_BLOCK:
        return K_MIN_BLOCK
    return (size + K_MIN_BLOCK - 1) // K_MIN_BLOCK * K_MIN_BLOCK


def allocation_size(rounded):
    if rounded <= K_SMALL_SIZE:
        return K_SMALL_BUFFER
    if rounded < K_MIN_LARGE_ALLOC:
        return K_LARGE_BUFFER
    return (rounded + K_ROUND_LARGE - 1) // K_ROUND_LARGE * K_ROUND_LARGE


# ---- frames: shared dicts, like the real files -----------------------------------

FRAME_POOL = {}


def frame(name, filename, line):
    key = (name, filename, line)
    if key not in FRAME_POOL:
        FRAME_POOL[key] = {'name': name, 'filename': filename, 'line': line}
    return FRAME_POOL[key]


CPP_FRAMES = [
    frame('torch::unwind::unwind()', '??', 0),
    frame('torch::CapturedTraceback::gather(bool, bool, bool)', '??', 0),
    frame('torch::cuda::(anonymous namespace)::gather_with_cpp()', 'memory_snapshot.cpp', 0),
    frame('c10::cuda::CUDACachingAllocator::Native::DeviceCachingAllocator::malloc', '??', 0),
]
PY_SITES = {
    'param': [frame('__init__', '/opt/train/model.py', 41), frame('build_model', '/opt/train/train.py', 88)],
    'optim': [frame('_init_group', '/usr/lib/python3/torch/optim/adamw.py', 158),
              frame('step', '/opt/train/train.py', 131)],
    'act': [frame('forward', '/opt/train/model.py', 77), frame('train_step', '/opt/train/train.py', 120)],
    'attn': [frame('attention', '/opt/train/model.py', 63), frame('forward', '/opt/train/model.py', 79),
             frame('train_step', '/opt/train/train.py', 120)],
    'grad': [frame('backward', '/usr/lib/python3/torch/autograd/graph.py', 825),
             frame('train_step', '/opt/train/train.py', 124)],
    'comm': [frame('all_reduce', '/usr/lib/python3/torch/distributed/c10d.py', 2501),
             frame('train_step', '/opt/train/train.py', 126)],
    'free': [frame('train_step', '/opt/train/train.py', 127), frame('main', '/opt/train/train.py', 190)],
    'cache': [frame('empty_cache', '/usr/lib/python3/torch/cuda/memory.py', 192),
              frame('main', '/opt/train/train.py', 195)],
}


def frames_for(site):
    # a new list each time (as each recorded context is), made of shared dicts
    return CPP_FRAMES + PY_SITES[site] + [frame('<module>', '/opt/train/train.py', 201)]


# ---- the allocator model ----------------------------------------------------------

class Block:
    __slots__ = ('addr', 'size', 'requested', 'allocated', 'pending', 'stream', 'small',
                 'seg', 'mapped', 'frames')

    def __init__(self, addr, size, stream, small, seg, mapped=True):
        self.addr, self.size, self.stream, self.small, self.seg = addr, size, stream, small, seg
        self.requested = 0
        self.allocated = False
        self.pending = False  # freed by the program, waiting for another stream
        self.mapped = mapped
        self.frames = []

    @property
    def free(self):
        return not self.allocated and not self.pending and self.mapped


class Segment:
    def __init__(self, addr, size, stream, small, expandable=False):
        self.addr, self.size, self.stream, self.small = addr, size, stream, small
        self.expandable = expandable
        self.blocks = []  # address order, tiling [addr, addr + size)
        self.frames = []


class Allocator:
    """PyTorch's caching allocator, reduced to placement (one device)."""

    def __init__(self, capacity, expandable=False, base=0x7F2C40000000):
        self.capacity = capacity
        self.expandable = expandable
        self.segments = []
        self.reserved = 0           # bytes held from the device (mapped, for expandable)
        self.next_addr = base       # the device's own address allocator: bump + reuse
        self.holes = []             # (addr, size) released address ranges
        self.recording = False
        self.trace = []
        self.time_us = 1_760_000_000_000_000
        self.with_time = True
        self.with_meta = True
        self.waiting = []           # [block, event done] of frees waiting for a stream

    # -- trace --
    def record(self, action, addr, size, stream, frames, oom_free=None):
        self.time_us += 37
        if not self.recording:
            return
        e = {'action': action}
        if action == 'oom':
            e['device_free'] = oom_free
        else:
            e['addr'] = addr
        e['size'] = size
        e['stream'] = stream
        if self.with_time:
            e['time_us'] = self.time_us
        if self.with_meta:
            e['compile_context'] = 'N/A'
            e['user_metadata'] = ''
        if frames is not None:
            e['frames'] = frames
        self.trace.append(e)

    # -- the device (cudaMalloc / cudaFree / cuMemMap) --
    def device_malloc(self, size):
        if self.reserved + size > self.capacity:
            return None
        for i, (a, s) in enumerate(self.holes):
            if s >= size:
                if s == size:
                    self.holes.pop(i)
                else:
                    self.holes[i] = (a + size, s - size)
                self.reserved += size
                return a
        a = self.next_addr
        self.next_addr += size
        self.reserved += size
        return a

    def device_free(self, addr, size):
        self.reserved -= size
        self.holes.append((addr, size))
        self.holes.sort()

    # -- lookup --
    def find_free(self, stream, small, rounded):
        best = None
        for seg in self.segments:
            if seg.stream != stream or seg.small != small:
                continue
            for b in seg.blocks:
                if b.free and b.size >= rounded:
                    if best is None or (b.size, b.addr) < (best.size, best.addr):
                        best = b
        return best

    def should_split(self, block, rounded):
        remaining = block.size - rounded
        if block.small or self.expandable:
            return remaining >= K_MIN_BLOCK
        return remaining > K_SMALL_SIZE  # max_split_size is unset (unlimited)

    def split(self, block, rounded):
        seg = block.seg
        rest = Block(block.addr + rounded, block.size - rounded, block.stream, block.small, seg)
        block.size = rounded
        seg.blocks.insert(seg.blocks.index(block) + 1, rest)

    def neighbours(self, block):
        seg = block.seg
        i = seg.blocks.index(block)
        prv = seg.blocks[i - 1] if i > 0 else None
        nxt = seg.blocks[i + 1] if i + 1 < len(seg.blocks) else None
        return prv, nxt

    def try_merge(self, dst, src):
        """try_merge_blocks: src joins dst when both are free and equally mapped."""
        if src is None or src.allocated or src.pending or src.mapped != dst.mapped:
            return
        seg = dst.seg
        if src.addr < dst.addr:
            dst.addr = src.addr
        dst.size += src.size
        seg.blocks.remove(src)

    # -- segments --
    def new_segment(self, stream, small, size, frames):
        addr = self.device_malloc(size)
        if addr is None:
            return None
        seg = Segment(addr, size, stream, small)
        seg.frames = frames if self.recording else []
        seg.blocks.append(Block(addr, size, stream, small, seg))
        self.segments.append(seg)
        self.record('segment_alloc', addr, size, stream, frames)
        return seg.blocks[0]

    def page_size(self, small):
        return K_SMALL_BUFFER if small else K_LARGE_BUFFER

    # expandable segments: find_expandable_block / map_block /
    # try_allocate_expandable_block of CUDACachingAllocator.cpp
    def find_expandable(self, stream, small, size):
        def allocatable(b):
            return b is not None and not b.allocated and not b.pending

        def room(b):
            got = 0
            while got < size and allocatable(b):
                got += b.size
                b = self.neighbours(b)[1]
            return got >= size

        unmapped = sorted((b for seg in self.segments if seg.expandable and seg.small == small
                           and seg.stream == stream for b in seg.blocks if not b.mapped),
                          key=lambda b: b.addr)
        for c in unmapped:
            prv = self.neighbours(c)[0]
            if allocatable(prv):
                c = prv
            if room(c):
                return c
        span = 64 * GiB  # address space only: PyTorch reserves 1.125 x device memory
        seg = Segment(self.next_addr, span, stream, small, expandable=True)
        self.next_addr += span
        seg.blocks.append(Block(seg.addr, span, stream, small, seg, mapped=False))
        self.segments.append(seg)
        return seg.blocks[0]

    def map_block(self, block, size, frames):
        page = self.page_size(block.small)
        size = min(block.size, (size + page - 1) // page * page)
        if self.reserved + size > self.capacity:
            return False
        self.reserved += size
        seg = block.seg
        if size < block.size:
            rest = Block(block.addr + size, block.size - size, block.stream, block.small, seg,
                         mapped=False)
            seg.blocks.insert(seg.blocks.index(block) + 1, rest)
            block.size = size
        block.mapped = True
        addr = block.addr
        prv, nxt = self.neighbours(block)
        self.try_merge(block, prv)
        self.try_merge(block, nxt)
        self.record('segment_map', addr, size, block.stream, frames)
        if seg.frames == [] and self.recording and block.addr == seg.addr:
            seg.frames = frames
        return True

    def expandable_block(self, stream, small, size, frames):
        c = self.find_expandable(stream, small, size)
        if not c.mapped and not self.map_block(c, min(c.size, size), frames):
            return None
        while c.size < size:
            # c is free and mapped, the next block unmapped: map some of it;
            # map_block merges c into it, so it becomes the candidate
            nxt = self.neighbours(c)[1]
            if not self.map_block(nxt, min(size - c.size, nxt.size), frames):
                return None
            c = nxt
        return c

    # -- the public operations --
    def malloc(self, size, stream, site):
        self.process_events()
        frames = frames_for(site) if self.recording else []
        rounded = round_size(size)
        small = rounded <= K_SMALL_SIZE
        block = self.find_free(stream, small, rounded)
        if block is None:
            block = self.grow(stream, small, rounded, frames)
            if block is None:
                self.release_cached()
                block = self.grow(stream, small, rounded, frames)
            if block is None:
                free = self.capacity - self.reserved  # cudaMemGetInfo's free bytes
                self.record('oom', None, rounded, stream, frames, oom_free=free)
                return None
        if self.should_split(block, rounded):
            self.split(block, rounded)
        block.allocated = True
        block.requested = size
        block.frames = frames
        self.record('alloc', block.addr, size, stream, frames)
        return block

    def grow(self, stream, small, rounded, frames):
        if self.expandable:
            return self.expandable_block(stream, small, rounded, frames)
        return self.new_segment(stream, small, allocation_size(rounded), frames)

    def free(self, block, other_stream_used=False):
        """free(): a block another stream used waits for that stream's event."""
        frames = frames_for('free') if self.recording else []
        block.allocated = False
        self.record('free_requested', block.addr, block.requested, block.stream, frames)
        block.frames = frames
        if other_stream_used:
            block.pending = True
            self.waiting.append([block, False])
            return
        self.free_block(block)

    def event_done(self, block):
        """The other stream finished with `block`; the next malloc completes its free."""
        for w in self.waiting:
            if w[0] is block:
                w[1] = True

    def process_events(self, everything=False):
        for w in list(self.waiting):
            if w[1] or everything:
                self.waiting.remove(w)
                self.free_block(w[0])

    def free_block(self, block):
        """free_block: the free completes and the block merges with free neighbours."""
        block.pending = False
        self.record('free_completed', block.addr, block.requested, block.stream, block.frames)
        prv, nxt = self.neighbours(block)
        self.try_merge(block, prv)
        self.try_merge(block, nxt)
        block.frames = []

    def free_blocks_in_order(self, small):
        """A pool's free set in its order: (stream, size, address)."""
        blocks = [b for seg in self.segments if seg.small == small for b in seg.blocks if b.free]
        return sorted(blocks, key=lambda b: (b.stream, b.size, b.addr))

    def release_cached(self):
        """release_cached_blocks (empty_cache, or before retrying a failed
        allocation): wait for pending frees, then release every free segment
        of the large pool, then of the small pool; expandable segments unmap
        the whole pages inside their free blocks."""
        frames = frames_for('cache') if self.recording else []
        self.process_events(everything=True)
        for small in (False, True):
            to_unmap = []
            for b in self.free_blocks_in_order(small):
                if b.seg.expandable:
                    to_unmap.append(b)
                elif len(b.seg.blocks) == 1:
                    seg = b.seg
                    self.segments.remove(seg)
                    self.record('segment_free', seg.addr, seg.size, seg.stream, frames)
                    self.device_free(seg.addr, seg.size)
            for b in to_unmap:
                self.unmap_block(b, frames)

    def unmap_block(self, b, frames):
        seg = b.seg
        page = self.page_size(seg.small)
        lo = seg.addr + (b.addr - seg.addr + page - 1) // page * page
        hi = seg.addr + (b.addr + b.size - seg.addr) // page * page
        if hi <= lo:
            return
        i = seg.blocks.index(b)
        if b.addr + b.size > hi:
            seg.blocks.insert(i + 1, Block(hi, b.addr + b.size - hi, b.stream, b.small, seg))
        if lo > b.addr:
            seg.blocks.insert(i, Block(b.addr, lo - b.addr, b.stream, b.small, seg))
        b.addr, b.size, b.mapped = lo, hi - lo, False
        self.reserved -= hi - lo
        prv, nxt = self.neighbours(b)
        self.try_merge(b, prv)
        self.try_merge(b, nxt)
        self.record('segment_unmap', lo, hi - lo, seg.stream, frames)
        if len(seg.blocks) == 1:  # release_expandable_segment: nothing mapped any more
            self.segments.remove(seg)

    # -- the snapshot --
    def snapshot_segments(self):
        out = []
        for seg in self.segments:
            runs = []
            for b in seg.blocks:
                if not b.mapped:
                    runs.append(None)
                    continue
                if not runs or runs[-1] is None:
                    runs.append([])
                runs[-1].append(b)
            for run in (r for r in runs if r):
                out.append(self.segment_dict(seg, run))
        out.sort(key=lambda s: s['address'])
        return out

    def segment_dict(self, seg, blocks):
        bl = []
        for b in blocks:
            state = 'active_allocated' if b.allocated else ('active_pending_free' if b.pending else 'inactive')
            bl.append({'address': b.addr, 'size': b.size, 'requested_size': b.requested,
                       'state': state, 'frames': b.frames if state != 'inactive' else NO_FRAMES})
        return {
            'device': 0,
            'address': blocks[0].addr,
            'total_size': sum(b.size for b in blocks),
            'allocated_size': sum(b.size for b in blocks if b.allocated),
            'active_size': sum(b.size for b in blocks if b.allocated or b.pending),
            'requested_size': sum(b.requested for b in blocks if b.allocated or b.pending),
            'stream': seg.stream,
            'segment_type': 'small' if seg.small else 'large',
            'segment_pool_id': (0, 0),
            'is_expandable': seg.expandable,
            'frames': seg.frames if seg.frames else NO_FRAMES,
            'blocks': bl,
        }


NO_FRAMES = []  # one shared empty list, as in the real files


def check_model(a):
    """The model's own invariants: blocks tile segments; counters agree."""
    mapped = 0
    for seg in a.segments:
        at = seg.addr
        for b in seg.blocks:
            assert b.addr == at and b.size > 0, (hex(b.addr), hex(at))
            at += b.size
            if b.mapped:
                mapped += b.size
            assert not (b.free and b.allocated)
        assert at == seg.addr + seg.size
        for x, y in zip(seg.blocks, seg.blocks[1:]):
            assert not (x.free and y.free), 'two free neighbours'
    assert mapped == a.reserved, (mapped, a.reserved)


# ---- the workload: a few steps of a small training run ------------------------------

def workload(a, steps=3, oom_at_end=False):
    MB = MiB
    # before recording: weights, optimizer state, a cached 64 MiB segment
    weights = [a.malloc(s, STREAM_MAIN, 'param') for s in
               (12 * MB, 12 * MB + 256, 3 * MB, 3 * MB, 700 * KiB, 4096, 4096, 300)]
    optim = [a.malloc(2 * w.requested, STREAM_MAIN, 'optim') for w in weights[:4]]
    scratch = a.malloc(5 * MB, STREAM_MAIN, 'act')      # freed after recording starts
    small_old = a.malloc(40000, STREAM_MAIN, 'act')
    a.free(a.malloc(64 * MB, STREAM_MAIN, 'act'))
    check_model(a)

    a.recording = True
    a.free(scratch)                                      # freed, never allocated in the trace
    a.free(small_old)
    for step in range(steps):
        acts = []
        for layer in range(3):
            acts.append(a.malloc(6 * MB + 512 * layer + 100, STREAM_MAIN, 'act'))
            acts.append(a.malloc(96 * KiB + 1000 * layer, STREAM_MAIN, 'attn'))
            tmp = a.malloc(1 * MB + 7, STREAM_MAIN, 'attn')  # just above the small pool
            tiny = a.malloc(100 + step, STREAM_MAIN, 'attn')  # rounds to 512
            a.free(tmp)
            a.free(tiny)
        big = a.malloc(30 * MB, STREAM_MAIN, 'act')       # splits the cached 64 MiB segment
        if step == steps - 1:
            # logits: a new 42 MiB segment (40 MiB + 4 KiB rounded to 2 MiB),
            # cached after the free and released by empty_cache below
            a.free(a.malloc(40 * MB + 4096, STREAM_MAIN, 'act'))
        # a gradient bucket made on the main stream and reduced on the comm stream
        bucket = a.malloc(11 * MB + 300 * step, STREAM_MAIN, 'grad')
        comm = a.malloc(2 * MB + 4096, STREAM_COMM, 'comm')
        comm_small = a.malloc(8192, STREAM_COMM, 'comm')
        for blk in reversed(acts):
            a.free(blk)
        a.free(bucket, other_stream_used=True)           # free_requested now ...
        a.free(comm_small)
        a.free(big)
        a.event_done(bucket)
        a.free(a.malloc(3000, STREAM_MAIN, 'attn'))      # ... free_completed in this malloc
        a.free(comm)
        if step == 1:
            # 11.5 MiB into the freed 12 MiB weight block: 0.5 MiB left is not
            # more than 1 MiB, so it stays inside the block as unsplit slack
            a.free(weights[0])
            weights[0] = a.malloc(11 * MB + 512 * KiB + 100, STREAM_MAIN, 'param')
        check_model(a)
    a.release_cached()                                   # torch.cuda.empty_cache()
    check_model(a)
    tail = [a.malloc(5 * MB, STREAM_MAIN, 'act'), a.malloc(2000, STREAM_COMM, 'comm')]
    pending = a.malloc(1 * MB + 1, STREAM_MAIN, 'grad')
    a.free(pending, other_stream_used=True)             # still pending when dumped
    if oom_at_end:
        a.malloc(a.capacity, STREAM_MAIN, 'act')        # more than the device has
    check_model(a)
    return weights, optim, tail


def settings(expandable):
    conf = 'expandable_segments:True' if expandable else ''
    return {
        'PYTORCH_CUDA_ALLOC_CONF': conf,
        'max_split_size': -1,
        'garbage_collection_threshold': 0.0,
        'expandable_segments': expandable,
        'pinned_num_register_threads': 1,
        'release_lock_on_cudamalloc': False,
        'pinned_use_cuda_host_register': False,
        'graph_capture_record_stream_reuse': False,
        'roundup_power2_divisions': {str(1 << i): 0 for i in range(16)},
    }


def build(variant):
    expandable = variant == 'expandable'
    capacity = 256 * MiB if variant == 'oom' else 80 * GiB
    a = Allocator(capacity, expandable=expandable)
    if variant == 'oldformat':
        a.with_time = False
        a.with_meta = False
    workload(a, oom_at_end=(variant == 'oom'))
    snap = {'segments': a.snapshot_segments(), 'device_traces': [a.trace]}
    if variant != 'oldformat':
        t0 = a.trace[0]['time_us']
        snap['allocator_settings'] = settings(expandable)
        snap['external_annotations'] = [
            {'stage': 'START', 'name': 'Optimizer.step#AdamW.step', 'device': 0, 'time_us': t0 + 500},
            {'stage': 'END', 'name': 'Optimizer.step#AdamW.step', 'device': 0, 'time_us': t0 + 900},
        ]
    return snap


# ---- the digest the C reader must reproduce ---------------------------------------------
# Canonical text of a decoded tree (tests/test_pickle.c writes the same):
#   N T F  i<decimal>  f<16 hex digits of the IEEE bits>  s<len>:<hex>  b<len>:<hex>
#   [a,b]  (a,b)  {k:v,k:v}
# and its FNV-1a 64-bit hash.

def canonical(v, out):
    if v is None:
        out.append('N')
    elif v is True:
        out.append('T')
    elif v is False:
        out.append('F')
    elif isinstance(v, int):
        out.append('i%d' % v)
    elif isinstance(v, float):
        out.append('f' + struct.pack('>d', v).hex())
    elif isinstance(v, str):
        b = v.encode('utf-8', 'surrogatepass')
        out.append('s%d:%s' % (len(b), b.hex()))
    elif isinstance(v, (bytes, bytearray)):
        out.append('b%d:%s' % (len(v), bytes(v).hex()))
    elif isinstance(v, (list, tuple)):
        out.append('[' if isinstance(v, list) else '(')
        for i, x in enumerate(v):
            if i:
                out.append(',')
            canonical(x, out)
        out.append(']' if isinstance(v, list) else ')')
    elif isinstance(v, dict):
        out.append('{')
        for i, (k, x) in enumerate(v.items()):
            if i:
                out.append(',')
            canonical(k, out)
            out.append(':')
            canonical(x, out)
        out.append('}')
    else:
        raise TypeError(type(v))


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h ^= byte
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def digest(obj):
    out = []
    canonical(obj, out)
    text = ''.join(out).encode()
    return fnv1a64(text), len(text)


# ---- bad inputs ------------------------------------------------------------------------

def bad_files(good, good_p2):
    bad = {}
    bad['truncated_half.pickle'] = good[:len(good) // 2]
    bad['truncated_no_stop.pickle'] = good[:-1]
    bad['truncated_p2.pickle'] = good_p2[:len(good_p2) * 2 // 3]  # no FRAME: cut inside data
    bad['empty.pickle'] = b''
    # GLOBAL + REDUCE: what pickle.dumps writes for an object (harmless name)
    bad['global_reduce.pickle'] = b'\x80\x02cbuiltins\nprint\nq\x00X\x05\x00\x00\x00helloq\x01\x85q\x02Rq\x03.'
    bad['stack_global.pickle'] = b'\x80\x04\x8c\x08builtins\x94\x8c\x05print\x94\x93\x94)R\x94.'
    bad['reduce.pickle'] = b'\x80\x02N)R.'
    bad['newobj.pickle'] = b'\x80\x02N)\x81.'
    bad['build.pickle'] = b'\x80\x02}(X\x01\x00\x00\x00aK\x01u}b.'
    bad['persid.pickle'] = b'\x80\x02K\x01Q.'
    bad['ext1.pickle'] = b'\x80\x02\x82\x01.'
    bad['deep_nesting.pickle'] = b'\x80\x02' + b']' * 200 + b'a' * 199 + b'.'
    bad['many_marks.pickle'] = b'\x80\x02' + b'(' * 1000 + b'N.'
    bad['absurd_binunicode.pickle'] = b'\x80\x02X\xf0\xff\xff\xffabc.'
    bad['absurd_binunicode8.pickle'] = b'\x80\x04\x8d' + struct.pack('<Q', 1 << 62) + b'abc.'
    bad['absurd_frame.pickle'] = b'\x80\x04\x95' + struct.pack('<Q', 1 << 40) + b'N.'
    bad['absurd_long4.pickle'] = b'\x80\x02\x8b\xff\xff\xff\x7f\x01.'
    bad['long_too_big.pickle'] = pickle.dumps(1 << 70, protocol=2)
    bad['memo_unset.pickle'] = b'\x80\x02h\x07.'
    bad['memo_huge_index.pickle'] = b'\x80\x02Nr\xff\xff\xff\x0f.'
    bad['unknown_opcode.pickle'] = b'\x80\x02\xff.'
    bad['proto_6.pickle'] = b'\x80\x06N.'
    bad['recursive_list.pickle'] = b'\x80\x02]q\x00h\x00a.'
    bad['set.pickle'] = pickle.dumps({1, 2}, protocol=4)
    bad['invalid_utf8.pickle'] = b'\x80\x02X\x02\x00\x00\x00\xc3\x28.'
    bad['unhashable_key.pickle'] = b'\x80\x02}]K\x01s.'
    bad['stack_leftover.pickle'] = b'\x80\x02NN.'
    # parse as pickles but are not snapshots: the snapshot reader must say what is missing
    bad['missing_segments.pickle'] = pickle.dumps({'device_traces': [[]]}, protocol=4)
    bad['missing_device_traces.pickle'] = pickle.dumps({'segments': []}, protocol=4)
    bad['not_a_dict.pickle'] = pickle.dumps([1, 2, 3], protocol=4)
    snap = pickle.loads(good)
    broken = dict(snap)
    broken['segments'] = [dict(s) for s in snap['segments']]
    del broken['segments'][0]['blocks']
    bad['segment_without_blocks.pickle'] = pickle.dumps(broken, protocol=4)
    broken = dict(snap)
    tr = [dict(e) for e in snap['device_traces'][0]]
    del tr[3]['addr']
    broken['device_traces'] = [tr]
    bad['trace_entry_without_addr.pickle'] = pickle.dumps(broken, protocol=4)
    return bad


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(root, 'tests', 'fixtures', 'snapshots')
    os.makedirs(os.path.join(out, 'bad'), exist_ok=True)
    written = {}
    plan = [('basic', (2, 4, 5)), ('expandable', (2, 4, 5)), ('oldformat', (4,)), ('oom', (4,))]
    expected = []
    for variant, protocols in plan:
        FRAME_POOL.clear()
        snap = build(variant)
        h, n = digest(snap)
        for proto in protocols:
            name = 'snapshot_%s_p%d.pickle' % (variant, proto)
            data = pickle.dumps(snap, protocol=proto)
            assert pickle.loads(data) == snap
            written[name] = data
            expected.append('%s %016x %d' % (name, h, n))
    for name, data in bad_files(written['snapshot_basic_p4.pickle'], written['snapshot_basic_p2.pickle']).items():
        written[os.path.join('bad', name)] = data
    for name, data in written.items():
        with open(os.path.join(out, name), 'wb') as f:
            f.write(data)
    with open(os.path.join(out, 'EXPECTED'), 'w') as f:
        f.write('# file fnv1a64-of-canonical-tree length (tools/gen_snapshot_fixtures.py)\n')
        f.write('\n'.join(expected) + '\n')
    print('wrote %d files to %s' % (len(written) + 1, out))


if __name__ == '__main__':
    main()
